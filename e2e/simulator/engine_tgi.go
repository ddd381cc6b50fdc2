package main

// Hugging Face text-generation-inference (text-generation-launcher 3.3.x),
// read from github.com/huggingface/text-generation-inference at db931fcf
// (January 2026): router/src/server.rs (routes, handlers, errors, metrics
// setup), router/src/lib.rs (request and response structs), router/src/chat.rs
// (chat stream chunks), router/src/validation.rs (length rules),
// router/src/infer/mod.rs (InferError), backends/v3/src (gauges).

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// tgiVersion is the newest release tag in the repository read (v3.3.7).
const tgiVersion = "3.3.7"

// tgiFingerprint is system_fingerprint: format!("{}-{}", info.version,
// info.docker_label.unwrap_or("native")) in server.rs; a native build has no
// docker label.
const tgiFingerprint = tgiVersion + "-native"

// tgiMaxGeneration is validation.rs DEFAULT_GENERATION_LENGTH: the length
// check uses min(max_new_tokens, 1024), the router re-queues past it.
const tgiMaxGeneration = 1024

// The TGI-only endpoints: /generate, /generate_stream, and POST / (which is
// either, by its "stream" field, and wraps a non-streaming answer in a list).
var (
	tgiGenerateAPI       = &api{}
	tgiGenerateStreamAPI = &api{}
	tgiCompatAPI         = &api{}
)

var tgiEngine = &engine{
	name: engineTGI,
	// The launcher starts the router only after the shards warmed up, and
	// the router binds only then (server.rs run: TcpListener::bind after
	// warmup), so while loading the port is closed.
	bindAfterLoad: true,
	register:      registerTGI,
	// axum answers an unknown route 404 and a wrong method 405, both with an
	// empty body.
	unrouted: func(w http.ResponseWriter, status int) { w.WriteHeader(status) },
	decode:   tgiDecode,
	// chat_completions takes the request's model only to echo it back;
	// nothing is ever rejected for its model name (server.rs).
	checkModel: false,
	limit:      tgiLimit,
	// generate_stream_internal validates inside the stream, so a streaming
	// request's validation error is a 200 with an error event (server.rs).
	validationInStream: true,
	fail:               tgiFail,
	streamHeaders: func(h http.Header, j *job) {
		// axum's Sse sets these two; generate_stream_internal adds the rest.
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("x-compute-type", "gpu+optimized")
		h.Set("X-Accel-Buffering", "no")
	},
	prepare: func(s *server, j *job, req *completionRequest) {
		j.id = "" // every TGI chunk and response has id "" (lib.rs ChatCompletionChunk::new)
		// include_usage defaults to false and stream_options alone does not
		// turn it on (lib.rs StreamOptions, chat.rs ChatState::push).
		j.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil && *req.StreamOptions.IncludeUsage
		model := s.cfg.model
		if j.api == chatAPI && req.Model != "" && req.Model != "tgi" {
			model = req.Model // server.rs chat_completions: model_id
		}
		j.modelJSON = quote(model)
		j.head = `,"model":` + j.modelJSON + `,"system_fingerprint":"` + tgiFingerprint + `","choices":[`
	},
	framers: map[*api]framer{
		chatAPI:              tgiChatFramer{},
		completionsAPI:       tgiTextFramer{},
		tgiGenerateStreamAPI: tgiGenerateFramer{},
		tgiCompatAPI:         tgiGenerateFramer{},
	},
	respond: tgiRespond,
	histograms: func(cfg config) map[string][]float64 {
		// server.rs: durations are 35 buckets 0.0001·1.5^k (k ≥ 1); input
		// lengths max_input_tokens/100·(x+1); generated tokens
		// max_total_tokens/100·(x+1).
		durations := make([]float64, 35)
		v := 0.0001
		for i := range durations {
			v *= 1.5
			durations[i] = v
		}
		input, generated := make([]float64, 100), make([]float64, 100)
		for x := range 100 {
			input[x] = float64(tgiMaxInput(cfg)) / 100 * float64(x+1)
			generated[x] = float64(cfg.maxModelLen) / 100 * float64(x+1)
		}
		return map[string][]float64{"queue": durations, "e2e": durations, "tpot": durations, "input": input, "generated": generated}
	},
}

// tgiMaxInput is max_input_tokens: the launcher's default when only
// --max-total-tokens (our --max-model-len) is given is one less.
func tgiMaxInput(cfg config) int { return max(cfg.maxModelLen-1, 1) }

func registerTGI(s *server, mux *http.ServeMux) {
	// server.rs: base_routes and info_routes.
	health := func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.fault == faultHealthFail {
			writeObj(w, http.StatusServiceUnavailable, obj{{"error", "unhealthy"}, {"error_type", "healthcheck"}})
			return
		}
		w.WriteHeader(http.StatusOK) // Ok(()): 200, empty body
	}
	mux.HandleFunc("GET /{$}", health)
	mux.HandleFunc("GET /health", health)
	mux.HandleFunc("GET /ping", health)
	mux.HandleFunc("POST /{$}", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, tgiCompatAPI) })
	mux.HandleFunc("POST /generate", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, tgiGenerateAPI) })
	mux.HandleFunc("POST /generate_stream", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, tgiGenerateStreamAPI) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, chatAPI) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, completionsAPI) })
	mux.HandleFunc("GET /info", func(w http.ResponseWriter, r *http.Request) {
		// lib.rs Info; the counts are the launcher's defaults.
		writeObj(w, http.StatusOK, obj{
			{"model_id", s.cfg.model}, {"model_sha", nil}, {"model_pipeline_tag", "text-generation"},
			{"max_concurrent_requests", 128}, {"max_best_of", 2}, {"max_stop_sequences", 4},
			{"max_input_tokens", tgiMaxInput(s.cfg)}, {"max_total_tokens", s.cfg.maxModelLen},
			{"validation_workers", 2}, {"max_client_batch_size", 4},
			{"router", "text-generation-router"}, {"version", tgiVersion}, {"sha", nil}, {"docker_label", nil},
		})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		// server.rs openai_get_model_info: created is always 0, owned_by the model.
		writeObj(w, http.StatusOK, obj{{"object", "list"}, {"data", []any{
			obj{{"id", s.cfg.model}, {"object", "model"}, {"created", 0}, {"owned_by", s.cfg.model}},
		}}})
	})
	mux.HandleFunc("GET /metrics", s.tgiMetrics)
}

// tgiFields are the fields serde knows per endpoint (lib.rs ChatRequest,
// CompletionRequest, GenerateRequest/CompatGenerateRequest); it ignores
// others, and rejects a known one given twice. max_completion_tokens is an
// alias of max_tokens, so a body with both is a duplicate.
var tgiFields = map[*api]map[string]string{
	chatAPI: fieldSet("model", "messages", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
		"max_tokens", "n", "presence_penalty", "stop", "stream", "seed", "temperature", "top_p", "tools",
		"tool_prompt", "tool_choice", "response_format", "stream_options").alias("max_completion_tokens", "max_tokens"),
	completionsAPI: fieldSet("model", "prompt", "max_tokens", "temperature", "top_p", "stream", "seed", "suffix",
		"repetition_penalty", "frequency_penalty", "stop"),
	tgiGenerateAPI:       fieldSet("inputs", "parameters"),
	tgiGenerateStreamAPI: fieldSet("inputs", "parameters"),
	tgiCompatAPI:         fieldSet("inputs", "parameters", "stream"),
}

type fields map[string]string

func fieldSet(names ...string) fields {
	f := fields{}
	for _, n := range names {
		f[n] = n
	}
	return f
}

func (f fields) alias(alias, name string) fields { f[alias] = name; return f }

// tgiRequired is the field serde reports missing per endpoint.
var tgiRequired = map[*api]string{chatAPI: "messages", completionsAPI: "prompt", tgiGenerateAPI: "inputs", tgiGenerateStreamAPI: "inputs", tgiCompatAPI: "inputs"}

// tgiDecode is axum's Json extractor on TGI's structs: 415 without a JSON
// Content-Type, 400 for a syntax error, 422 for a body serde cannot map,
// each as text/plain (axum JsonRejection).
func tgiDecode(r *http.Request, body []byte, a *api) (completionRequest, *apiError) {
	var req completionRequest
	plain := func(status int, msg string) (completionRequest, *apiError) {
		return req, &apiError{status: status, contentType: "text/plain; charset=utf-8", body: []byte(msg)}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil ||
		!(mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return plain(http.StatusUnsupportedMediaType, "Expected request with `Content-Type: application/json`")
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return plain(http.StatusBadRequest, "Failed to parse the request body as JSON: "+err.Error())
	}
	const dataErr = "Failed to deserialize the JSON body into the target type: "
	keys, ok := topLevelKeys(body)
	if !ok {
		line, col := lineCol(body, 1)
		return plain(http.StatusUnprocessableEntity, fmt.Sprintf(dataErr+"invalid type: expected a struct at line %d column %d", line, col))
	}
	known := tgiFields[a]
	seen := map[string]bool{}
	var params json.RawMessage
	for _, k := range keys {
		name, isKnown := known[k.name]
		if !isKnown {
			continue
		}
		if seen[name] {
			line, col := lineCol(body, k.afterKey)
			return plain(http.StatusUnprocessableEntity, fmt.Sprintf(dataErr+"duplicate field `%s` at line %d column %d", name, line, col))
		}
		seen[name] = true
		if name == "max_tokens" && strings.HasPrefix(strings.TrimSpace(string(k.raw)), "-") {
			line, col := lineCol(body, k.end)
			return plain(http.StatusUnprocessableEntity, fmt.Sprintf(dataErr+"%s: invalid value: integer `%s`, expected u32 at line %d column %d", k.name, strings.TrimSpace(string(k.raw)), line, col))
		}
		if name == "parameters" {
			params = k.raw
		}
	}
	if field := tgiRequired[a]; !seen[field] {
		end := int64(len(strings.TrimRight(string(body), " \t\r\n")))
		line, col := lineCol(body, end)
		return plain(http.StatusUnprocessableEntity, fmt.Sprintf(dataErr+"missing field `%s` at line %d column %d", field, line, col))
	}
	switch a {
	case chatAPI, completionsAPI:
		if err := json.Unmarshal(body, &req); err != nil {
			return plain(http.StatusUnprocessableEntity, dataErr+err.Error())
		}
		if a == completionsAPI {
			// lib.rs Prompt: a string or a list of strings, never token ids.
			var one string
			var many []string
			if json.Unmarshal(req.Prompt, &one) != nil && (json.Unmarshal(req.Prompt, &many) != nil || len(many) == 0) {
				return plain(http.StatusUnprocessableEntity, dataErr+"prompt: data did not match any variant of untagged enum PromptDeserializer")
			}
		}
	default:
		var g struct {
			Inputs json.RawMessage `json:"inputs"`
			Stream bool            `json:"stream"`
		}
		var p struct {
			MaxNewTokens *int `json:"max_new_tokens"`
			Details      bool `json:"details"`
		}
		if json.Unmarshal(body, &g) != nil || (params != nil && json.Unmarshal(params, &p) != nil) {
			return plain(http.StatusUnprocessableEntity, dataErr+"invalid type in inputs or parameters")
		}
		var inputs string
		if json.Unmarshal(g.Inputs, &inputs) != nil {
			return plain(http.StatusUnprocessableEntity, dataErr+"inputs: invalid type: expected a string")
		}
		req.Prompt, req.MaxTokens, req.details = g.Inputs, p.MaxNewTokens, p.Details
		req.Stream = a == tgiGenerateStreamAPI || a == tgiCompatAPI && g.Stream
	}
	return req, nil
}

// tgiLimit is validation.rs validate_input: max_new_tokens 0 is rejected,
// the total check uses min(max_new_tokens, 1024), then the input alone is
// checked against max_input_tokens.
func tgiLimit(s *server, j *job, explicit bool) *verdict {
	const prefix = "Input validation error: " // infer/mod.rs InferError::ValidationError
	if j.maxTokens < 1 {
		return &verdict{msg: prefix + "`max_new_tokens` must be strictly positive"}
	}
	chunk := min(j.maxTokens, tgiMaxGeneration)
	if j.promptTokens+chunk > s.cfg.maxModelLen {
		return &verdict{msg: fmt.Sprintf(prefix+"`inputs` tokens + `max_new_tokens` must be <= %d. Given: %d `inputs` tokens and %d `max_new_tokens`",
			s.cfg.maxModelLen, j.promptTokens, chunk)}
	}
	if maxInput := tgiMaxInput(s.cfg); j.promptTokens > maxInput {
		return &verdict{msg: fmt.Sprintf(prefix+"`inputs` must have less than %d tokens. Given: %d", maxInput, j.promptTokens)}
	}
	return nil
}

// tgiFail renders server.rs's From<InferError> for (StatusCode,
// Json<ErrorResponse>): {"error": message, "error_type": kind}.
func tgiFail(kind errorKind, msg, param string) *apiError {
	e := func(status int, msg, typ string) *apiError {
		return jsonError(status, obj{{"error", msg}, {"error_type", typ}})
	}
	switch kind {
	case errInternal:
		// InferError::IncompleteGeneration is TGI's only 500.
		return e(http.StatusInternalServerError, "Incomplete generation", "incomplete_generation")
	case errMidGeneration:
		// A shard failing mid-request is InferError::GenerationError: 424.
		return e(http.StatusFailedDependency, "Request failed during generation: "+msg, "generation")
	case errLoading:
		return e(http.StatusServiceUnavailable, "unhealthy", "healthcheck")
	}
	return e(http.StatusUnprocessableEntity, msg, "validation")
}

// tgiOpenAIError is InferError::into_openai_event (infer/mod.rs), the error
// event of the OpenAI-compatible streams: http_status_code is always 422.
func tgiOpenAIError(b []byte, msg string) []byte {
	b = append(b, `data: {"error":{"message":`...)
	b = append(b, quote(msg)...)
	return append(b, `,"http_status_code":422}}`+"\n\n"...)
}

func tgiUsage(j *job) obj {
	return obj{{"prompt_tokens", j.promptTokens}, {"completion_tokens", j.maxTokens}, {"total_tokens", j.promptTokens + j.maxTokens}}
}

func appendNow(b []byte) []byte { return strconv.AppendInt(b, time.Now().Unix(), 10) }

// tgiChatFramer: chat.rs create_event_from_stream_token. No role chunk:
// every delta is {"role":"assistant","content":token}; every chunk carries
// "usage":null; the usage chunk (choices [], id "") follows the last token
// only with include_usage true; then [DONE] (server.rs chat_completions).
type tgiChatFramer struct{}

func (tgiChatFramer) first(b []byte, j *job) []byte { return b }

func (tgiChatFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, `data: {"object":"chat.completion.chunk","id":"","created":`...)
	b = appendNow(b)
	b = append(b, j.head...)
	b = append(b, `{"index":0,"delta":{"role":"assistant","content":"`...)
	b = append(b, token(i)...)
	if i == j.maxTokens-1 {
		return append(b, `"},"logprobs":null,"finish_reason":"length"}],"usage":null}`+"\n\n"...)
	}
	return append(b, `"},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n"...)
}

func (tgiChatFramer) trailer(b []byte, j *job) []byte {
	if j.includeUsage {
		b = append(b, `data: {"object":"chat.completion.chunk","id":"","created":`...)
		b = appendNow(b)
		b = append(b, j.head...)
		b = append(b, `],"usage":`...)
		b = append(b, marshal(tgiUsage(j))...)
		b = append(b, "}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

func (tgiChatFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	b = tgiOpenAIError(b, "Request failed during generation: simulated engine failure mid-stream")
	return append(b, "data: [DONE]\n\n"...), true
}

func (tgiChatFramer) inBandError(b []byte, j *job, msg string) []byte {
	return append(tgiOpenAIError(b, msg), "data: [DONE]\n\n"...)
}

// tgiTextFramer: server.rs completions. Chunks are Completion::Chunk (fields
// id, created, choices, model, system_fingerprint; finish_reason ""); the
// last token is a Completion::Final that always carries usage, whatever
// stream_options says; then [DONE].
type tgiTextFramer struct{}

func (tgiTextFramer) first(b []byte, j *job) []byte { return b }

func (tgiTextFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, `data: {"object":"text_completion","id":"","created":`...)
	b = appendNow(b)
	if i < j.maxTokens-1 {
		b = append(b, `,"choices":[{"index":0,"text":"`...)
		b = append(b, token(i)...)
		b = append(b, `","logprobs":null,"finish_reason":""}],"model":`...)
		b = append(b, j.modelJSON...)
		return append(b, `,"system_fingerprint":"`+tgiFingerprint+`"}`+"\n\n"...)
	}
	b = append(b, j.head...)
	b = append(b, `{"index":0,"text":"`...)
	b = append(b, token(i)...)
	b = append(b, `","logprobs":null,"finish_reason":"length"}],"usage":`...)
	b = append(b, marshal(tgiUsage(j))...)
	return append(b, "}\n\n"...)
}

func (tgiTextFramer) trailer(b []byte, j *job) []byte { return append(b, "data: [DONE]\n\n"...) }

func (tgiTextFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	return tgiChatFramer{}.abort(b, j, sent)
}

func (tgiTextFramer) inBandError(b []byte, j *job, msg string) []byte {
	return tgiChatFramer{}.inBandError(b, j, msg)
}

// tgiGenerateFramer: server.rs generate_stream, TGI's own stream. Each event
// is a StreamResponse (lib.rs); the last has generated_text and, if
// parameters.details, details. No [DONE]; errors are ErrorResponse events.
type tgiGenerateFramer struct{}

func (tgiGenerateFramer) first(b []byte, j *job) []byte { return b }

func tgiToken(i int) obj {
	return obj{{"id", 1000 + i%len(vocabulary)}, {"text", token(i)}, {"logprob", json.Number("0.0")}, {"special", false}}
}

func (tgiGenerateFramer) token(b []byte, j *job, i int) []byte {
	ev := obj{{"index", i + 1}, {"token", tgiToken(i)}, {"generated_text", nil}, {"details", nil}}
	if i == j.maxTokens-1 {
		ev[2].v = generatedText(j.maxTokens)
		if j.details {
			ev[3].v = obj{{"finish_reason", "length"}, {"generated_tokens", j.maxTokens}, {"seed", nil}, {"input_length", j.promptTokens}}
		}
	}
	b = append(b, "data: "...)
	b = append(b, marshal(ev)...)
	return append(b, "\n\n"...)
}

func (tgiGenerateFramer) trailer(b []byte, j *job) []byte { return b }

func (tgiGenerateFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	return tgiErrorEvent(b, "Request failed during generation: simulated engine failure mid-stream", "generation"), true
}

func (tgiGenerateFramer) inBandError(b []byte, j *job, msg string) []byte {
	return tgiErrorEvent(b, msg, "validation")
}

func tgiErrorEvent(b []byte, msg, typ string) []byte {
	b = append(b, "data: "...)
	b = append(b, marshal(obj{{"error", msg}, {"error_type", typ}})...)
	return append(b, "\n\n"...)
}

func generatedText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(token(i))
	}
	return b.String()
}

// tgiRespond writes the non-streaming answers: CompletionType::ChatCompletion
// and Completion::Final (tagged with "object" first, id ""), GenerateResponse,
// and POST /'s list of one GenerateResponse (server.rs compat_generate).
func tgiRespond(s *server, w http.ResponseWriter, j *job, text string) {
	switch j.api {
	case chatAPI:
		writeObj(w, http.StatusOK, obj{
			{"object", "chat.completion"}, {"id", ""}, {"created", j.created}, {"model", json.RawMessage(j.modelJSON)},
			{"system_fingerprint", tgiFingerprint},
			{"choices", []any{obj{{"index", 0}, {"message", obj{{"role", "assistant"}, {"content", text}}}, {"logprobs", nil}, {"finish_reason", "length"}}}},
			{"usage", tgiUsage(j)},
		})
	case completionsAPI:
		writeObj(w, http.StatusOK, obj{
			{"object", "text_completion"}, {"id", ""}, {"created", j.created}, {"model", s.cfg.model},
			{"system_fingerprint", tgiFingerprint},
			{"choices", []any{obj{{"index", 0}, {"text", text}, {"logprobs", nil}, {"finish_reason", "length"}}}},
			{"usage", tgiUsage(j)},
		})
	default:
		resp := obj{{"generated_text", text}}
		if j.details {
			tokens := make([]any, j.maxTokens)
			for i := range tokens {
				tokens[i] = tgiToken(i)
			}
			resp = append(resp, kv{"details", obj{{"finish_reason", "length"}, {"generated_tokens", j.maxTokens}, {"seed", nil}, {"prefill", []any{}}, {"tokens", tokens}}})
		}
		if j.api == tgiCompatAPI {
			writeObj(w, http.StatusOK, []any{resp})
			return
		}
		writeObj(w, http.StatusOK, resp)
	}
}

// tgiMetrics renders metrics-exporter-prometheus 0.15 (server.rs sets up the
// recorder and descriptions): HELP only for described metrics, a blank line
// after each family, counters as integers, floats in Rust's notation, and a
// metric appears only once it was first recorded. TGI has no
// time-to-first-token histogram; queue and request durations are the nearest.
func (s *server) tgiMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	family := func(name, kind, help string) {
		if help != "" {
			fmt.Fprintf(&b, "# HELP %s %s\n", name, help)
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n", name, kind)
	}
	rust := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	x := &s.x
	if n := x.requests.Load(); n > 0 {
		family("tgi_request_count", "counter", "Total number of requests")
		fmt.Fprintf(&b, "tgi_request_count %d\n\n", n)
		// backends/v3/src/queue.rs and backend.rs set these per request.
		family("tgi_queue_size", "gauge", "Current queue size")
		fmt.Fprintf(&b, "tgi_queue_size %s\n\n", rust(float64(s.m.waiting.Load())))
		family("tgi_batch_current_size", "gauge", "Current batch size")
		fmt.Fprintf(&b, "tgi_batch_current_size %s\n\n", rust(float64(s.m.running.Load())))
	}
	if n := x.total(&x.finished); n > 0 {
		family("tgi_request_success", "counter", "Number of successful requests")
		fmt.Fprintf(&b, "tgi_request_success %d\n\n", n)
	}
	x.failMu.Lock()
	failures := map[string]int64{}
	for label, n := range x.failures {
		// InferError kinds as server.rs and the v3 backend label them.
		failures[map[string]string{"validation": "validation", "internal": "incomplete", "generation": "generation"}[label]] += n
	}
	x.failMu.Unlock()
	if len(failures) > 0 {
		family("tgi_request_failure", "counter", "")
		for _, label := range []string{"validation", "incomplete", "generation"} {
			if n, ok := failures[label]; ok {
				fmt.Fprintf(&b, "tgi_request_failure{err=\"%s\"} %d\n", label, n)
			}
		}
		b.WriteString("\n")
	}
	hist := func(name, key, help string) {
		cum, sum := x.merged(key)
		if cum[len(cum)-1] == 0 {
			return
		}
		family(name, "histogram", help)
		for i, le := range x.hists[key][0].bounds {
			fmt.Fprintf(&b, "%s_bucket{le=\"%s\"} %d\n", name, rust(le), cum[i])
		}
		fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n\n", name, cum[len(cum)-1], name, rust(sum), name, cum[len(cum)-1])
	}
	hist("tgi_request_input_length", "input", "Input token length per request")
	hist("tgi_request_generated_tokens", "generated", "Generated tokens per request")
	hist("tgi_request_queue_duration", "queue", "Request queue duration")
	hist("tgi_request_duration", "e2e", "Request duration")
	hist("tgi_request_mean_time_per_token_duration", "tpot", "Mean time per token per request")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(b.String()))
}
