package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	engineVLLM   = "vllm"
	engineTGI    = "tgi"
	engineTRTLLM = "trtllm"
	engineSGLang = "sglang"
)

var engineNames = []string{engineVLLM, engineTGI, engineTRTLLM, engineSGLang}

// engine is everything that differs between the servers the simulator can
// imitate. The request pipeline (complete, stream, respond) is shared; it asks
// the engine wherever the real servers differ. The vLLM entry reproduces the
// simulator's original behaviour exactly; the others are in engine_*.go, each
// difference next to the source file it follows.
type engine struct {
	name string

	// bindAfterLoad: the port opens only after --startup-seconds (the model
	// load); vLLM instead listens at once and answers 503 while loading.
	bindAfterLoad bool
	// warmupTokens: after binding, the health routes answer 503 until a
	// warmup request of this many tokens would have finished (0: none).
	warmupTokens int

	register func(s *server, mux *http.ServeMux)
	// unrouted answers unknown routes (404) and wrong methods (405); nil
	// leaves Go's own answers (vLLM mode, unchanged).
	unrouted func(w http.ResponseWriter, status int)

	// decode parses a completion request body the way the engine does,
	// including its rejections of bodies other engines accept.
	decode func(r *http.Request, body []byte, a *api) (completionRequest, *apiError)
	// checkModel: a request naming another model is a 404 (vLLM); the others
	// echo whatever model the request names.
	checkModel bool
	// limit applies the context-length and max_tokens rules; it may lower
	// j.maxTokens (trtllm) or return the error to answer with.
	limit func(s *server, j *job, explicit bool) *verdict
	// validationInStream: a streaming request's validation error goes inside
	// a 200 stream (TGI), not in an HTTP error.
	validationInStream bool
	// headersAtFirstToken: a stream's 200 leaves with its first chunk
	// (SGLang), not as soon as the request is read.
	headersAtFirstToken bool

	fail          func(kind errorKind, msg, param string) *apiError
	streamHeaders func(h http.Header, j *job)
	// prepare sets the job's id, model and chunk prefix for this engine.
	prepare func(s *server, j *job, req *completionRequest)
	framers map[*api]framer
	respond func(s *server, w http.ResponseWriter, j *job, text string)

	// histograms names the engine's histograms and their bucket bounds.
	histograms func(cfg config) map[string][]float64
	// httpStatus is the status label of the engine's HTTP counter (vLLM's
	// class "2xx", SGLang's code "200"); nil: the engine has no such counter.
	httpStatus func(status int) string
}

func (e *engine) framer(a *api) framer { return e.framers[a] }

var engines = map[string]*engine{
	engineVLLM:   vllmEngine,
	engineTGI:    tgiEngine,
	engineTRTLLM: trtllmEngine,
	engineSGLang: sglangEngine,
}

// framer writes one engine's SSE chunks for one API into a reused buffer.
type framer interface {
	// first is written just before token 0 (a role chunk, or nothing).
	first(b []byte, j *job) []byte
	token(b []byte, j *job, i int) []byte
	// trailer follows the last token: finish/usage chunks and the terminator.
	trailer(b []byte, j *job) []byte
	// abort is --fault error-event after sent tokens; ok false means the
	// engine drops the connection instead of sending anything.
	abort(b []byte, j *job, sent int) (out []byte, ok bool)
	// inBandError is a validation error inside a 200 stream (TGI only).
	inBandError(b []byte, j *job, msg string) []byte
}

// errorKind names an error situation; each engine renders it its own way.
type errorKind int

const (
	errInvalid       errorKind = iota // malformed request body or prompt
	errValidation                     // context length, max_tokens out of range
	errUnknownModel                   // vLLM: model not served
	errInternal                       // --fault http500, --failure-rate
	errMidGeneration                  // --fault error-event, non-streaming
	errLoading                        // vLLM: --startup-seconds not over
)

// verdict is a request rejected by an engine's limit rules.
type verdict struct {
	msg, param string
	// late: the engine notices only once generation starts, after a
	// stream's 200 went out (trtllm).
	late bool
}

// apiError is an error answer, fully rendered.
type apiError struct {
	status      int
	contentType string // "" sends no Content-Type
	body        []byte
}

func (e *apiError) write(w http.ResponseWriter) {
	if e.contentType != "" {
		w.Header().Set("Content-Type", e.contentType)
	}
	w.WriteHeader(e.status)
	w.Write(e.body)
}

func jsonError(status int, v any) *apiError {
	return &apiError{status: status, contentType: "application/json", body: marshal(v)}
}

// ---- vLLM: the simulator's original behaviour ----

var vllmEngine = &engine{
	name:     engineVLLM,
	register: registerVLLM,
	decode: func(r *http.Request, body []byte, a *api) (completionRequest, *apiError) {
		var req completionRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return req, vllmFail(errInvalid, "invalid JSON body: "+err.Error(), "")
		}
		return req, nil
	},
	checkModel: true,
	limit: func(s *server, j *job, explicit bool) *verdict {
		if j.maxTokens < 1 {
			return &verdict{msg: fmt.Sprintf("max_tokens must be at least 1, got %d.", j.maxTokens), param: "max_tokens"}
		}
		if total := j.promptTokens + j.maxTokens; total > s.cfg.maxModelLen {
			return &verdict{msg: fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				s.cfg.maxModelLen, total, j.promptTokens, j.maxTokens)}
		}
		return nil
	},
	fail: vllmFail,
	streamHeaders: func(h http.Header, j *job) {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	},
	// prometheus_fastapi_instrumentator groups status codes into classes.
	httpStatus: func(status int) string { return strconv.Itoa(status/100) + "xx" },
	prepare:    func(s *server, j *job, req *completionRequest) {},
	framers:    map[*api]framer{chatAPI: vllmFramer{}, completionsAPI: vllmFramer{}},
	respond:    respondVLLM,
	histograms: func(config) map[string][]float64 {
		return nil
	},
}

func vllmFail(kind errorKind, msg, param string) *apiError {
	status, typ := http.StatusBadRequest, "BadRequestError"
	switch kind {
	case errUnknownModel:
		status, typ = http.StatusNotFound, "NotFoundError"
	case errInternal, errMidGeneration:
		status, typ = http.StatusInternalServerError, "InternalServerError"
	case errLoading:
		status, typ = http.StatusServiceUnavailable, "ServiceUnavailableError"
	}
	e := errorInfo{Message: msg, Type: typ, Code: status}
	if param != "" {
		e.Param = &param
	}
	body, _ := json.Marshal(errorResponse{e})
	return &apiError{status: status, contentType: "application/json", body: body}
}

// vllmFramer is vLLM's framing, driven by the api's constant pieces.
type vllmFramer struct{}

func (vllmFramer) first(b []byte, j *job) []byte {
	if j.api.roleChunk != "" {
		b = appendChunkHead(b, j, j.modelJSON)
		b = append(b, j.api.roleChunk...)
	}
	return b
}

func (vllmFramer) token(b []byte, j *job, i int) []byte {
	b = appendChunkHead(b, j, j.modelJSON)
	b = append(b, j.api.tokenOpen...)
	b = append(b, token(i)...)
	if i == j.maxTokens-1 {
		return append(b, j.api.lastClose...)
	}
	return append(b, j.api.tokenClose...)
}

func (vllmFramer) trailer(b []byte, j *job) []byte {
	if j.includeUsage {
		b = appendChunkHead(b, j, j.modelJSON)
		b = append(b, `],"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(j.promptTokens), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(j.promptTokens+j.maxTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(j.maxTokens), 10)
		b = append(b, "}}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

func (vllmFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	b = append(b, `data: {"error":{"message":"simulated engine failure mid-stream","type":"InternalServerError","param":null,"code":500}}`+"\n\n"...)
	return append(b, "data: [DONE]\n\n"...), true
}

func (vllmFramer) inBandError(b []byte, j *job, msg string) []byte { return b }

// ---- shared helpers for the other engines ----

// kv and obj build JSON objects whose keys keep the order the real servers
// write them in (Go maps would sort them).
type kv struct {
	k string
	v any
}

type obj []kv

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(marshal(f.k))
		b.WriteByte(':')
		b.Write(marshal(f.v))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without Go's HTML escaping, which none of the
// imitated servers (serde_json, orjson, pydantic) does.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func quote(s string) string { return string(marshal(s)) }

func writeObj(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(marshal(v))
}

// requestModel is the model the request names, or def if it names none.
func requestModel(req *completionRequest, def string) string {
	if req.Model != "" {
		return req.Model
	}
	return def
}

// jsonKey is a top-level key of a request body, in order, with its raw value
// and the byte offsets just after the key and after the value.
type jsonKey struct {
	name          string
	raw           json.RawMessage
	afterKey, end int64
}

// topLevelKeys lists the keys of a JSON object body; ok is false if the
// body is not an object (the caller then reports its own parse error).
func topLevelKeys(body []byte) ([]jsonKey, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var keys []jsonKey
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k := jsonKey{name: t.(string), afterKey: dec.InputOffset()}
		if err := dec.Decode(&k.raw); err != nil {
			return nil, false
		}
		k.end = dec.InputOffset()
		keys = append(keys, k)
	}
	return keys, true
}

// lineCol is serde_json's position after offset bytes: 1-based line, and the
// number of bytes since the line's start.
func lineCol(body []byte, offset int64) (int, int) {
	line, start := 1, int64(0)
	for i := int64(0); i < offset && i < int64(len(body)); i++ {
		if body[i] == '\n' {
			line, start = line+1, i+1
		}
	}
	return line, int(offset - start)
}

// pyRepr renders a JSON value as Python's repr() of what json.loads makes of
// it, as FastAPI's validation messages quote request values.
func pyRepr(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	var walk func() bool
	walk = func() bool {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch v := t.(type) {
		case json.Delim:
			closer, sep := "]", ", "
			if v == '{' {
				closer = "}"
				b.WriteByte('{')
			} else {
				b.WriteByte('[')
			}
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(sep)
				}
				if v == '{' {
					k, _ := dec.Token()
					b.WriteString(pyString(k.(string)))
					b.WriteString(": ")
				}
				if !walk() {
					return false
				}
			}
			dec.Token()
			b.WriteString(closer)
		case string:
			b.WriteString(pyString(v))
		case json.Number:
			if strings.ContainsAny(string(v), ".eE") {
				f, _ := v.Float64()
				b.WriteString(pyFloat(f))
			} else {
				b.WriteString(string(v))
			}
		case bool:
			if v {
				b.WriteString("True")
			} else {
				b.WriteString("False")
			}
		case nil:
			b.WriteString("None")
		}
		return true
	}
	if !walk() {
		return string(raw)
	}
	return b.String()
}

func pyString(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyFloat is Python's repr() of a float.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	// Python switches to an exponent below 1e-4 and from 1e16; both write it
	// with at least two digits ("1e-05").
	if a := math.Abs(f); a < 1e-4 || a >= 1e16 {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// promFloat is prometheus_client's floatToGoString: repr(), but switching to
// an exponent sooner, as Go does.
func promFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	s := pyFloat(f)
	if dot := strings.IndexByte(s, '.'); f > 0 && dot > 6 && !strings.ContainsRune(s, 'e') {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return fmt.Sprintf("%se+0%d", mantissa, dot-1)
	}
	return s
}

// histogram is one Prometheus histogram (non-cumulative counts; the last
// is +Inf).
type histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64
	sum    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v: Prometheus' le
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

// snapshot returns cumulative bucket counts (the last is +Inf) and the sum.
func (h *histogram) snapshot() ([]uint64, float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cum := make([]uint64, len(h.counts))
	var c uint64
	for i, n := range h.counts {
		c += n
		cum[i] = c
	}
	return cum, h.sum
}

// engineMetrics records what the other engines' /metrics report beyond the
// shared gauges and counters of metrics. Histograms and counters are kept
// per streaming flag (index 1 for streaming requests), as SGLang labels them.
type engineMetrics struct {
	requests atomic.Int64 // requests that reached a completion handler

	hists map[string]*[2]*histogram

	failMu   sync.Mutex
	failures map[string]int64

	prompt, generated, finished [2]atomic.Int64

	statsMu   sync.Mutex
	lastStats int64 // trtllm /metrics: finished count at the previous scrape
}

func (x *engineMetrics) init(eng *engine, cfg config) {
	x.hists = map[string]*[2]*histogram{}
	x.failures = map[string]int64{}
	for name, bounds := range eng.histograms(cfg) {
		x.hists[name] = &[2]*histogram{newHistogram(bounds), newHistogram(bounds)}
	}
}

func streamIndex(stream bool) int {
	if stream {
		return 1
	}
	return 0
}

func (x *engineMetrics) observe(name string, stream bool, d time.Duration) {
	x.observeValue(name, stream, d.Seconds())
}

func (x *engineMetrics) observeValue(name string, stream bool, v float64) {
	if h := x.hists[name]; h != nil {
		h[streamIndex(stream)].observe(v)
	}
}

func (x *engineMetrics) fail(label string) {
	x.failMu.Lock()
	x.failures[label]++
	x.failMu.Unlock()
}

// finish records a request that produced all its tokens.
func (x *engineMetrics) finish(j *job) {
	i := streamIndex(j.stream)
	x.prompt[i].Add(int64(j.promptTokens))
	x.generated[i].Add(int64(j.maxTokens))
	x.finished[i].Add(1)
	x.observe("e2e", j.stream, time.Since(j.arrival))
	x.observeValue("input", j.stream, float64(j.promptTokens))
	x.observeValue("generated", j.stream, float64(j.maxTokens))
	if j.maxTokens > 1 {
		x.observeValue("tpot", j.stream, time.Since(j.admit).Seconds()/float64(j.maxTokens))
	}
}

// merged is a histogram's two halves (streaming and not) added together.
func (x *engineMetrics) merged(name string) ([]uint64, float64) {
	h := x.hists[name]
	a, sa := h[0].snapshot()
	b, sb := h[1].snapshot()
	for i := range a {
		a[i] += b[i]
	}
	return a, sa + sb
}

func (x *engineMetrics) total(c *[2]atomic.Int64) int64 { return c[0].Load() + c[1].Load() }

// promLabels renders Prometheus labels sorted by name, as prometheus_client
// writes them.
func promLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for key, val := range labels {
		out[key] = val
	}
	out[k] = v
	return out
}

// pyProm writes metric families the way prometheus_client's multiprocess
// collector exposes them (SGLang and trtllm-serve both run it): every HELP
// is "Multiprocess metric", values are Python floats, a histogram's _sum
// comes before its buckets and _count.
type pyProm struct{ b strings.Builder }

func (p *pyProm) family(name, kind string) {
	fmt.Fprintf(&p.b, "# HELP %s Multiprocess metric\n# TYPE %s %s\n", name, name, kind)
}

func (p *pyProm) sample(name string, labels map[string]string, v float64) {
	fmt.Fprintf(&p.b, "%s%s %s\n", name, promLabels(labels), promFloat(v))
}

func (p *pyProm) histogram(name string, labels map[string]string, bounds []float64, cum []uint64, sum float64) {
	p.sample(name+"_sum", labels, sum)
	for i, le := range bounds {
		p.sample(name+"_bucket", withLabel(labels, "le", promFloat(le)), float64(cum[i]))
	}
	p.sample(name+"_bucket", withLabel(labels, "le", "+Inf"), float64(cum[len(bounds)]))
	p.sample(name+"_count", labels, float64(cum[len(bounds)]))
}

func (p *pyProm) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(p.b.String()))
}

// fastAPIUnrouted is FastAPI's (Starlette's) answer to an unknown route or
// method, shared by SGLang and trtllm-serve.
func fastAPIUnrouted(w http.ResponseWriter, status int) {
	detail := "Not Found"
	if status == http.StatusMethodNotAllowed {
		detail = "Method Not Allowed"
	}
	writeObj(w, status, obj{{"detail", detail}})
}

// openAIError is the {"object":"error","message","type","param","code"}
// body that SGLang and trtllm-serve share (both adapted vLLM's early
// ErrorResponse).
func openAIError(status int, typ, msg string) *apiError {
	return jsonError(status, obj{{"object", "error"}, {"message", msg}, {"type", typ}, {"param", nil}, {"code", status}})
}
