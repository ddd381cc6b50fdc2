// Command vllm-sim stands in for vLLM's OpenAI-compatible server in deployctl's
// end-to-end tests: same routes, JSON shapes and SSE framing, but no model.
// Every output is deterministic so tests can assert exact values, and token
// timing follows a fixed schedule so load tests can check TTFT/TPOT figures.
// With --engine it stands in for Hugging Face TGI, TensorRT-LLM's trtllm-serve
// or SGLang instead (see "Engine modes" below).
//
// Usage:
//
//	vllm-sim --port P --model NAME --ttft-ms X --itl-ms Y [--max-num-seqs N]
//	         [--max-model-len L] [--failure-rate PCT] [--seed S]
//	         [--startup-seconds S] [--fault MODE] [--host 127.0.0.1]
//	         [--engine vllm|tgi|trtllm|sglang] [--api-key KEY]
//
// Behaviour the tests rely on:
//
//   - Output length is exactly max_completion_tokens, else max_tokens, else 16,
//     whether or not ignore_eos is set: a simulator that stopped early at random
//     would make token-count assertions flaky. finish_reason is therefore
//     always "length".
//   - Prompt tokens are counted by countTokens (no tokenizer is ever
//     downloaded): each run of letters/digits is one token, each other
//     non-space character is one token. Chat prompts add up the text of all
//     messages, with no template overhead. Completion prompts may also be
//     token-id arrays, which count one token per id.
//   - A request's token i (0-based) leaves at admit + ttft + i·itl, where
//     admit is when its headers were read or, for a request that had to queue
//     behind --max-num-seqs busy slots, the moment it got a slot (FIFO).
//     Deadlines are absolute, so jitter never accumulates into drift. Go's
//     timers wake up to ~1 ms late on Linux (epoll has millisecond
//     resolution), and a burst of many streams due at once is written one
//     after another, so individual gaps jitter while their mean stays exact.
//   - Streaming requests get their 200 and headers at once, as from vLLM,
//     even while queued. A chat stream's role chunk (delta.role "assistant",
//     content "") goes out with the first token, as vLLM sends it when the
//     engine's first output arrives; both leave in one flush.
//   - As in vLLM, the last token is followed by a usage chunk (choices: [])
//     when stream_options is present and include_usage is not false, then by
//     "data: [DONE]".
//   - --failure-rate fails that share of completion requests with a 500
//     before admission; the seeded RNG (--seed) makes the sequence repeat.
//   - Until --startup-seconds have passed every route but /metrics answers 503:
//     the port is open while the "model" loads.
//   - /metrics exposes vllm:num_requests_running, vllm:num_requests_waiting,
//     vllm:prompt_tokens_total, vllm:generation_tokens_total,
//     vllm:request_success_total, vllm:kv_cache_usage_perc (tokens being
//     served over max-num-seqs × max-model-len), the histograms
//     vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds and
//     vllm:e2e_request_latency_seconds, and http_requests_total by route,
//     method and status class: the families deployctl's metric table for
//     vLLM names (orchestrator/data/engine_metrics/vllm/).
//   - --api-key KEY (or the VLLM_API_KEY variable, as vLLM reads it; the flag
//     wins) guards every path under /v1, /v2, /inference and /cohere as vLLM's
//     AuthenticationMiddleware does: a request without "Authorization: Bearer
//     KEY" (scheme case-insensitive) gets 401 {"error": "Unauthorized"}, before
//     routing and before the loading 503; OPTIONS, /health and /metrics stay
//     open. vLLM mode only.
//   - Nothing is ever dialled: the only socket is the listener.
//
// Fault modes (--fault), for tests of the clients' error handling:
//
//	none         normal operation
//	refuse       never listen (connections are refused), but keep running until
//	             signalled, like a container whose server failed to bind
//	http500      every completion request answers 500 with vLLM's error JSON
//	stall        send the headers and the first token (non-streaming: only the
//	             headers), then nothing until the client disconnects
//	no-done      streams end after the last token: no usage chunk, no [DONE]
//	             (non-streaming requests are unaffected)
//	error-event  an HTTP 200 stream sends up to 3 tokens, then, at the next
//	             token's time, {"error": {...,"type":"InternalServerError",
//	             "code":500}} and, as vLLM does after an error, [DONE]
//	             (non-streaming: a 500 at that time)
//	health-fail  /health answers 500 forever
//
// Everything above describes --engine vllm (the default), whose behaviour is
// unchanged by the engine modes.
//
// # Engine modes
//
// --engine tgi|trtllm|sglang makes the simulator behave as that engine's
// server does wherever a client or a Kubernetes probe can see it: routes, the
// health answers while loading, SSE framing, error bodies and /metrics.
// Output length, prompt-token counting and token timing are the same in every
// mode, except that trtllm clamps max_tokens to the context as the real server
// does. The per-engine differences live in one table, engines (engine.go),
// with the source file that each difference follows named beside it in
// engine_tgi.go, engine_sglang.go and engine_trtllm.go. In brief:
//
//	tgi     text-generation-launcher 3.3.x (router/src/server.rs, lib.rs,
//	        chat.rs, validation.rs, infer/mod.rs). Not listening until
//	        --startup-seconds have passed (the router binds only after the
//	        shards warmed up). Adds /info, /generate, /generate_stream, POST /
//	        and /ping. Chunks have id "", system_fingerprint and "usage":null;
//	        every delta carries role "assistant" (no role chunk); the usage
//	        chunk (choices [], id "") needs stream_options.include_usage true;
//	        completion streams put usage in their last chunk. Errors are
//	        {"error","error_type"}; validation is 422, and inside a stream an
//	        {"error":{"message","http_status_code":422}} event. A chat body
//	        with both max_tokens and max_completion_tokens is a 422 (serde
//	        duplicate field). /metrics has tgi_* names.
//	sglang  sglang.launch_server 0.5.x (srt/entrypoints/http_server.py,
//	        openai/serving_chat.py, serving_completions.py, protocol.py,
//	        managers/tokenizer_manager.py, observability/metrics_collector.py).
//	        Not listening while the weights load; then /health and
//	        /health_generate answer 503 until an 8-token warmup request has run.
//	        Adds /health_generate, /ready, /get_model_info, /model_info. A
//	        stream's 200 leaves with its first chunk; context errors are a
//	        plain 400. The last token is followed by a finish_reason chunk, the
//	        usage chunk needs include_usage true. Errors are {"object":"error",
//	        "message","type","param","code"}. /metrics has sglang:* names.
//	trtllm  trtllm-serve 1.x, PyTorch backend (tensorrt_llm/serve/
//	        openai_server.py, openai_protocol.py, postprocess_handlers.py,
//	        metrics/collector.py). Not listening until loaded. Adds
//	        /health_generate, /version, /perf_metrics, /prometheus/metrics;
//	        /metrics is a JSON list of iteration stats, not Prometheus. Request
//	        bodies with unknown fields, or both max_tokens and
//	        max_completion_tokens, are a 400 {"error": "<validation errors>"}.
//	        Chunks omit null fields; the role chunk's line ends in " \n\n"; the
//	        usage chunk needs stream_options (include_usage defaults to true
//	        there). A prompt that fills the context is a 400 (a dropped
//	        connection once streaming), a max_tokens past it is clamped.
//	        /prometheus/metrics has collector.py's five unprefixed families.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
)

const (
	faultNone       = "none"
	faultRefuse     = "refuse"
	faultHTTP500    = "http500"
	faultStall      = "stall"
	faultNoDone     = "no-done"
	faultErrorEvent = "error-event"
	faultHealthFail = "health-fail"
)

var faults = []string{faultNone, faultRefuse, faultHTTP500, faultStall, faultNoDone, faultErrorEvent, faultHealthFail}

// errorEventAfter is how many tokens an error-event stream sends before its error.
const errorEventAfter = 3

// defaultMaxTokens is vLLM's default for the completions API; chat uses it too
// so that a request without a limit stays short and predictable. The other
// engines use it as well (their own defaults run to the end of the context).
const defaultMaxTokens = 16

type config struct {
	host        string
	port        int
	model       string
	ttft        time.Duration
	itl         time.Duration
	maxNumSeqs  int
	maxModelLen int
	failureRate float64
	seed        uint64
	startup     time.Duration
	fault       string
	engine      string
	apiKey      string
}

func parseFlags(args []string) (config, error) {
	var c config
	var ttftMS, itlMS, startupS float64
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.port, "port", 8000, "port to listen on (0 picks a free one; the listening line names it)")
	fs.StringVar(&c.model, "model", "", "served model name (required)")
	fs.Float64Var(&ttftMS, "ttft-ms", 100, "time to first token after admission, in milliseconds")
	fs.Float64Var(&itlMS, "itl-ms", 20, "inter-token latency, in milliseconds")
	fs.IntVar(&c.maxNumSeqs, "max-num-seqs", 256, "requests decoding at once; the rest queue FIFO")
	fs.IntVar(&c.maxModelLen, "max-model-len", 32768, "context length; longer prompt+max_tokens get vLLM's 400")
	fs.Float64Var(&c.failureRate, "failure-rate", 0, "percentage of completion requests that fail with 500")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the RNG that picks the failing requests")
	fs.Float64Var(&startupS, "startup-seconds", 0, "seconds during which /health answers 503 (other engines: the port stays closed)")
	fs.StringVar(&c.fault, "fault", faultNone, "fault mode: "+strings.Join(faults, ", "))
	fs.StringVar(&c.engine, "engine", engineVLLM, "serving engine to imitate: "+strings.Join(engineNames, ", "))
	fs.StringVar(&c.apiKey, "api-key", os.Getenv("VLLM_API_KEY"), "require Authorization: Bearer KEY on /v1/* (default $VLLM_API_KEY)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.ttft = time.Duration(ttftMS * float64(time.Millisecond))
	c.itl = time.Duration(itlMS * float64(time.Millisecond))
	c.startup = time.Duration(startupS * float64(time.Second))
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.model == "":
		return c, errors.New("--model is required")
	case c.port < 0 || c.port > 65535:
		return c, fmt.Errorf("--port %d is out of range", c.port)
	case c.ttft < 0 || c.itl < 0 || c.startup < 0:
		return c, errors.New("--ttft-ms, --itl-ms and --startup-seconds must not be negative")
	case c.maxNumSeqs < 1 || c.maxModelLen < 1:
		return c, errors.New("--max-num-seqs and --max-model-len must be at least 1")
	case c.failureRate < 0 || c.failureRate > 100:
		return c, errors.New("--failure-rate is a percentage, 0 to 100")
	case engines[c.engine] == nil:
		return c, fmt.Errorf("unknown --engine %q (want one of %s)", c.engine, strings.Join(engineNames, ", "))
	case c.apiKey != "" && c.engine != engineVLLM:
		return c, fmt.Errorf("--api-key imitates vLLM's API key check only, not --engine %s", c.engine)
	}
	for _, f := range faults {
		if c.fault == f {
			return c, nil
		}
	}
	return c, fmt.Errorf("unknown --fault %q (want one of %s)", c.fault, strings.Join(faults, ", "))
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled. Shutdown cancels the in-flight requests
// rather than draining them, so a stalled or long stream cannot delay exit.
func run(ctx context.Context, cfg config) error {
	if cfg.engine == "" {
		cfg.engine = engineVLLM
	}
	eng := engines[cfg.engine]
	addr := net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port))
	if cfg.fault == faultRefuse {
		fmt.Fprintf(os.Stderr, "vllm-sim fault=refuse: not listening on %s model=%s\n", addr, cfg.model)
		<-ctx.Done()
		return nil
	}
	if eng.bindAfterLoad && cfg.startup > 0 {
		// These servers open their port only once the model is loaded: until
		// then a connection is refused, exactly as from a crashed process.
		fmt.Fprintf(os.Stderr, "vllm-sim engine=%s: loading for %v before binding %s model=%s\n", eng.name, cfg.startup, addr, cfg.model)
		select {
		case <-time.After(cfg.startup):
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	sim := newServer(cfg, time.Now())
	srv := &http.Server{
		Handler:           sim.routes(),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if eng == engines[engineVLLM] {
		fmt.Fprintf(os.Stderr, "vllm-sim listening on %s model=%s\n", ln.Addr(), cfg.model)
	} else {
		fmt.Fprintf(os.Stderr, "vllm-sim listening on %s model=%s engine=%s\n", ln.Addr(), cfg.model, eng.name)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The handlers see ctx cancelled and return at once; a short grace lets them end their responses.
	// Not longer: Shutdown counts a connection that never sent a request (a port-forward's, held
	// open) as busy for 5 s, which every test that stops a simulator would wait out.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return srv.Close()
	}
	return nil
}

const shutdownGrace = 300 * time.Millisecond

type server struct {
	cfg       config
	eng       *engine
	started   time.Time
	ready     time.Time // before this, vLLM answers 503 (the model is "loading")
	warm      time.Time // before this, SGLang's health routes answer 503 (warmup request)
	modelJSON string    // the model name as a JSON string, spliced into SSE chunks

	// slots holds one token per decoding request. Blocked senders on a Go
	// channel are served in arrival order, which gives vLLM's FIFO waiting
	// queue without a hand-written one.
	slots chan struct{}

	rngMu sync.Mutex
	rng   *rand.Rand

	nextID atomic.Uint64
	m      metrics
	x      engineMetrics
}

// newServer builds the simulator as it is at now: for vLLM the moment the
// process started (it then loads for --startup-seconds with its port open);
// for the engines that bind only after loading, the moment they bound.
func newServer(cfg config, now time.Time) *server {
	if cfg.engine == "" {
		cfg.engine = engineVLLM
	}
	eng := engines[cfg.engine]
	name, _ := json.Marshal(cfg.model)
	s := &server{
		cfg:       cfg,
		eng:       eng,
		started:   now,
		ready:     now,
		warm:      now,
		modelJSON: string(name),
		slots:     make(chan struct{}, cfg.maxNumSeqs),
		rng:       rand.New(rand.NewPCG(cfg.seed, cfg.seed)),
	}
	if !eng.bindAfterLoad {
		s.ready = now.Add(cfg.startup)
	}
	if eng.warmupTokens > 0 {
		s.warm = s.deadline(now, eng.warmupTokens-1)
	}
	s.m.init()
	s.x.init(eng, cfg)
	return s
}

// guardedPrefixes are the paths vLLM's AuthenticationMiddleware checks the key on.
var guardedPrefixes = []string{"/v1", "/v2", "/inference", "/cohere"}

// routes is the engine's handler, behind vLLM's API key check when --api-key is set.
func (s *server) routes() http.Handler {
	h := s.engineRoutes()
	if s.cfg.apiKey == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.cfg.apiKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions && guarded(r.URL.Path) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			got := sha256.Sum256([]byte(token))
			if !strings.EqualFold(scheme, "bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func guarded(path string) bool {
	for _, prefix := range guardedPrefixes {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

func (s *server) engineRoutes() http.Handler {
	mux := http.NewServeMux()
	s.eng.register(s, mux)
	if s.eng.unrouted == nil {
		return s.instrumented(mux)
	}
	// The other engines' frameworks answer unknown routes (404) and known
	// routes with another method (405) in their own way.
	return s.instrumented(mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		status := http.StatusNotFound
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := *r
			probe.Method = m
			if _, pattern := mux.Handler(&probe); pattern != "" {
				status = http.StatusMethodNotAllowed
				break
			}
		}
		s.eng.unrouted(w, status)
	}))
}

func registerVLLM(s *server, mux *http.ServeMux) {
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, chatAPI) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, completionsAPI) })
}

func (s *server) loading(now time.Time) bool { return now.Before(s.ready) }

// warming reports whether the engine's own warmup request is still running
// (SGLang marks itself up only after it).
func (s *server) warming(now time.Time) bool { return now.Before(s.warm) }

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.cfg.fault == faultHealthFail:
		writeError(w, http.StatusInternalServerError, "InternalServerError", "health check failed (--fault health-fail)", "")
	case s.loading(time.Now()):
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	if s.loading(time.Now()) {
		writeLoading(w)
		return
	}
	created := s.started.Unix()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":            s.cfg.model,
			"object":        "model",
			"created":       created,
			"owned_by":      "vllm",
			"root":          s.cfg.model,
			"parent":        nil,
			"max_model_len": s.cfg.maxModelLen,
			"permission": []map[string]any{{
				"id": fmt.Sprintf("modelperm-%016x", uint64(s.started.UnixNano())), "object": "model_permission",
				"created": created, "allow_create_engine": false, "allow_sampling": true,
				"allow_logprobs": true, "allow_search_indices": false, "allow_view": true,
				"allow_fine_tuning": false, "organization": "*", "group": nil, "is_blocking": false,
			}},
		}},
	})
}

// completionRequest holds the request fields the simulator acts on; vLLM
// ignores unknown fields, and so does encoding/json.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`

	// details is TGI's parameters.details on /generate and /generate_stream.
	details bool
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// api holds the per-endpoint constant pieces of a stream chunk, so that a
// token costs a few appends to a reused buffer instead of a JSON encode.
type api struct {
	idPrefix    string
	chunkObject string
	object      string
	roleChunk   string // sent before the first token; empty for completions
	tokenOpen   string
	tokenClose  string
	lastClose   string // closes the final token's chunk, carrying finish_reason
}

var chatAPI = &api{
	idPrefix:    "chatcmpl-",
	chunkObject: "chat.completion.chunk",
	object:      "chat.completion",
	roleChunk:   `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n",
	tokenOpen:   `{"index":0,"delta":{"content":"`,
	tokenClose:  `"},"logprobs":null,"finish_reason":null}]}` + "\n\n",
	lastClose:   `"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}` + "\n\n",
}

var completionsAPI = &api{
	idPrefix:    "cmpl-",
	chunkObject: "text_completion",
	object:      "text_completion",
	tokenOpen:   `{"index":0,"text":"`,
	tokenClose:  `","logprobs":null,"finish_reason":null,"stop_reason":null}]}` + "\n\n",
	lastClose:   `","logprobs":null,"finish_reason":"length","stop_reason":null}]}` + "\n\n",
}

// job is one admitted completion request.
type job struct {
	api          *api
	id           string
	created      int64
	promptTokens int
	maxTokens    int
	includeUsage bool
	stream       bool
	details      bool // TGI /generate: parameters.details
	arrival      time.Time
	admit        time.Time

	modelJSON string // the model name the chunks carry, as a JSON string
	head      string // engine-made chunk prefix, fixed for the whole stream
}

// deadline is when token i (0-based) is due: anchored on admission so that
// late wake-ups never push later tokens back.
func (s *server) deadline(admit time.Time, i int) time.Time {
	return admit.Add(s.cfg.ttft + time.Duration(i)*s.cfg.itl)
}

func (s *server) complete(w http.ResponseWriter, r *http.Request, a *api) {
	arrival := time.Now()
	eng := s.eng
	if s.loading(arrival) {
		eng.fail(errLoading, "the model is still loading (--startup-seconds)", "").write(w)
		return
	}
	// Reading the body to EOF (rather than streaming it into a decoder) lets
	// net/http start watching the connection, so a client that disconnects
	// cancels r.Context() and frees its slot.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 32<<20))
	if err != nil {
		eng.fail(errInvalid, err.Error(), "").write(w)
		return
	}
	req, apiErr := eng.decode(r, body, a)
	if apiErr != nil {
		apiErr.write(w)
		return
	}
	s.x.requests.Add(1)
	if eng.checkModel && req.Model != "" && req.Model != s.cfg.model {
		eng.fail(errUnknownModel, fmt.Sprintf("The model `%s` does not exist.", req.Model), "model").write(w)
		return
	}
	j := &job{api: a, created: arrival.Unix(), arrival: arrival, stream: req.Stream, details: req.details}
	if a == chatAPI {
		j.promptTokens, err = chatPromptTokens(req.Messages)
	} else {
		j.promptTokens, err = completionPromptTokens(req.Prompt)
	}
	if err != nil {
		eng.fail(errInvalid, err.Error(), "").write(w)
		return
	}
	j.maxTokens = defaultMaxTokens
	explicit := true
	if req.MaxCompletionTokens != nil {
		j.maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		j.maxTokens = *req.MaxTokens
	} else {
		explicit = false
	}
	if v := eng.limit(s, j, explicit); v != nil {
		s.x.fail("validation")
		switch {
		case req.Stream && eng.validationInStream:
			// TGI validates inside the stream: 200, an error event, [DONE].
			if out := s.openStream(w, j); out != nil {
				out.buf = eng.framer(a).inBandError(out.buf, j, v.msg)
				out.send()
			}
		case req.Stream && v.late:
			// trtllm-serve finds this only once the stream has started: the
			// exception ends the response without a terminating chunk.
			s.openStream(w, j)
			panic(http.ErrAbortHandler)
		default:
			eng.fail(errValidation, v.msg, v.param).write(w)
		}
		return
	}
	if s.cfg.fault == faultHTTP500 || s.failNext() {
		s.x.fail("internal")
		eng.fail(errInternal, "simulated engine failure", "").write(w)
		return
	}
	j.id = fmt.Sprintf("%s%016x%016x", a.idPrefix, uint64(s.started.UnixNano()), s.nextID.Add(1))
	j.includeUsage = req.StreamOptions != nil && (req.StreamOptions.IncludeUsage == nil || *req.StreamOptions.IncludeUsage)
	j.modelJSON = s.modelJSON
	eng.prepare(s, j, &req)
	s.m.promptTokens.Add(int64(j.promptTokens))

	ctx := r.Context()
	var out *sse
	if req.Stream {
		if eng.headersAtFirstToken {
			// SGLang runs its stream generator up to the first chunk before
			// it returns the response, so the 200 leaves with that chunk.
			out = s.newSSE(w)
		} else {
			// vLLM answers a streaming request with 200 and its headers at
			// once, before the engine schedules it.
			if out = s.openStream(w, j); out == nil {
				return
			}
		}
	}
	var ok bool
	if j.admit, ok = s.acquire(ctx, arrival); !ok {
		return
	}
	defer s.release()
	s.m.kvTokens.Add(int64(j.promptTokens))
	defer s.m.kvTokens.Add(-int64(j.promptTokens))
	s.x.observe("queue", j.stream, j.admit.Sub(arrival))
	if req.Stream {
		s.stream(ctx, w, out, j)
	} else {
		s.respond(ctx, w, j)
	}
}

// newSSE makes the event writer of a stream whose headers are not sent yet.
func (s *server) newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
}

// openStream sends a stream's 200 and headers; nil if the client is gone.
func (s *server) openStream(w http.ResponseWriter, j *job) *sse {
	out := s.newSSE(w)
	s.eng.streamHeaders(w.Header(), j)
	w.WriteHeader(http.StatusOK)
	if out.rc.Flush() != nil {
		return nil
	}
	return out
}

// failNext draws from the seeded RNG, so a given --seed fails the same
// sequence of requests every run.
func (s *server) failNext() bool {
	if s.cfg.failureRate <= 0 {
		return false
	}
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()*100 < s.cfg.failureRate
}

// acquire takes a decoding slot, queueing if all --max-num-seqs are busy. It
// returns the admission time that anchors the token schedule.
func (s *server) acquire(ctx context.Context, arrival time.Time) (time.Time, bool) {
	select {
	case s.slots <- struct{}{}:
		s.m.running.Add(1)
		return arrival, true
	default:
	}
	s.m.waiting.Add(1)
	defer s.m.waiting.Add(-1)
	select {
	case s.slots <- struct{}{}:
		s.m.running.Add(1)
		return time.Now(), true
	case <-ctx.Done():
		return time.Time{}, false
	}
}

func (s *server) release() {
	s.m.running.Add(-1)
	<-s.slots
}

// sse writes Server-Sent Events through one reused buffer and flushes every
// write, so each event leaves the process at its scheduled time.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func (e *sse) send() error {
	_, err := e.w.Write(e.buf)
	e.buf = e.buf[:0]
	if err != nil {
		return err
	}
	return e.rc.Flush()
}

func appendChunkHead(b []byte, j *job, modelJSON string) []byte {
	b = append(b, `data: {"id":"`...)
	b = append(b, j.id...)
	b = append(b, `","object":"`...)
	b = append(b, j.api.chunkObject...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, j.created, 10)
	b = append(b, `,"model":`...)
	b = append(b, modelJSON...)
	b = append(b, `,"choices":[`...)
	return b
}

func (s *server) stream(ctx context.Context, w http.ResponseWriter, out *sse, j *job) {
	f := s.eng.framer(j.api)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	sent := 0
	defer func() {
		s.m.generationTokens.Add(int64(sent))
		s.m.kvTokens.Add(-int64(sent))
	}()
	last := j.arrival
	for i := 0; i < j.maxTokens; i++ {
		if !sleepUntil(ctx, timer, s.deadline(j.admit, i)) {
			return
		}
		now := time.Now()
		if i > 0 {
			s.m.itl.observe(now.Sub(last).Seconds())
			s.x.observe("itl", j.stream, now.Sub(last))
		}
		last = now
		s.m.kvTokens.Add(1)
		if i == 0 {
			s.m.observeTTFT(time.Since(j.arrival))
			s.x.observe("ttft", j.stream, time.Since(j.arrival))
			if s.eng.headersAtFirstToken {
				s.eng.streamHeaders(w.Header(), j)
				w.WriteHeader(http.StatusOK)
			}
			out.buf = f.first(out.buf, j)
		}
		if s.cfg.fault == faultErrorEvent && i == min(errorEventAfter, j.maxTokens-1) {
			s.x.fail("generation")
			b, ok := f.abort(out.buf, j, sent)
			out.buf = b
			out.send()
			if !ok {
				// trtllm-serve: the generator raises, and the response ends
				// without its terminating chunk.
				panic(http.ErrAbortHandler)
			}
			return
		}
		out.buf = f.token(out.buf, j, i)
		if out.send() != nil {
			return
		}
		sent++
		if s.cfg.fault == faultStall {
			<-ctx.Done()
			return
		}
	}
	s.m.requestsFinished.Add(1)
	s.m.e2e.observe(time.Since(j.arrival).Seconds())
	s.x.finish(j)
	if s.cfg.fault == faultNoDone {
		return
	}
	out.buf = f.trailer(out.buf, j)
	out.send()
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// respond answers a non-streaming request when its last token is due.
func (s *server) respond(ctx context.Context, w http.ResponseWriter, j *job) {
	if s.cfg.fault == faultStall {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-ctx.Done()
		return
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	if !sleepUntil(ctx, timer, s.deadline(j.admit, 0)) {
		return
	}
	s.m.observeTTFT(time.Since(j.arrival))
	s.x.observe("ttft", j.stream, time.Since(j.arrival))
	if s.cfg.fault == faultErrorEvent {
		if sleepUntil(ctx, timer, s.deadline(j.admit, min(errorEventAfter, j.maxTokens-1))) {
			s.x.fail("generation")
			s.eng.fail(errMidGeneration, "simulated engine failure mid-generation", "").write(w)
		}
		return
	}
	if !sleepUntil(ctx, timer, s.deadline(j.admit, j.maxTokens-1)) {
		return
	}
	var b strings.Builder
	for i := range j.maxTokens {
		b.WriteString(token(i))
	}
	text := b.String()
	s.m.generationTokens.Add(int64(j.maxTokens))
	s.m.requestsFinished.Add(1)
	s.m.e2e.observe(time.Since(j.arrival).Seconds())
	s.x.finish(j)
	s.eng.respond(s, w, j, text)
}

// respondVLLM writes vLLM's chat.completion or text_completion object.
func respondVLLM(s *server, w http.ResponseWriter, j *job, text string) {
	c := choice{FinishReason: "length"}
	if j.api == chatAPI {
		c.Message = &chatReply{Role: "assistant", Content: text, ToolCalls: []any{}}
	} else {
		c.Text = &text
	}
	writeJSON(w, http.StatusOK, completionResponse{
		ID:      j.id,
		Object:  j.api.object,
		Created: j.created,
		Model:   s.cfg.model,
		Choices: []choice{c},
		Usage:   usage{PromptTokens: j.promptTokens, TotalTokens: j.promptTokens + j.maxTokens, CompletionTokens: j.maxTokens},
	})
}

// completionResponse and its parts are structs, not maps, so that fields come
// out in vLLM's order, which keeps captured responses easy to compare.
type completionResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// choice is a chat choice (Message set) or a completions choice (Text set).
type choice struct {
	Index        int        `json:"index"`
	Text         *string    `json:"text,omitempty"`
	Message      *chatReply `json:"message,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason string     `json:"finish_reason"`
	StopReason   any        `json:"stop_reason"`
}

type chatReply struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

// sleepUntil waits for the absolute deadline on a reused timer (one per
// request, not one per token) and reports false if ctx ends first.
func sleepUntil(ctx context.Context, t *time.Timer, deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// vocabulary cycles through a fixed sentence; every entry is plain ASCII, so
// it can be spliced into JSON without escaping.
var vocabulary = [...]string{" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}

// token is the text of output token i: "The quick brown fox … dog. The quick …".
func token(i int) string {
	if i == 0 {
		return "The"
	}
	return vocabulary[i%len(vocabulary)]
}

// countTokens approximates a tokenizer without downloading one: each maximal
// run of letters and digits is one token, and so is each other non-space
// character. "Hello, world!" is 4 tokens.
func countTokens(s string) int {
	n := 0
	inWord := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if !inWord {
				n++
			}
			inWord = true
		case unicode.IsSpace(r):
			inWord = false
		default:
			n++
			inWord = false
		}
	}
	return n
}

// chatPromptTokens counts the text of every message; content is either a
// string or a list of parts, of which only "text" parts count.
func chatPromptTokens(msgs []chatMessage) (int, error) {
	if len(msgs) == 0 {
		return 0, errors.New("messages must be a non-empty list")
	}
	n := 0
	for _, m := range msgs {
		if len(m.Content) == 0 || string(m.Content) == "null" {
			continue
		}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			n += countTokens(text)
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return 0, errors.New("message content must be a string or a list of content parts")
		}
		for _, p := range parts {
			if p.Type == "text" {
				n += countTokens(p.Text)
			}
		}
	}
	return n, nil
}

// completionPromptTokens accepts the prompt forms vLLM does: a string, a list
// of strings, a list of token ids, or a list of such lists. Several prompts are
// counted together and answered as one choice.
func completionPromptTokens(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return countTokens(text), nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		n := 0
		for _, t := range texts {
			n += countTokens(t)
		}
		return n, nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return len(ids), nil
	}
	var idLists [][]int
	if json.Unmarshal(raw, &idLists) == nil {
		n := 0
		for _, l := range idLists {
			n += len(l)
		}
		return n, nil
	}
	return 0, errors.New("prompt must be a string, a list of strings, or token ids")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// errorResponse is vLLM's ErrorResponse; code repeats the HTTP status.
type errorResponse struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// writeError answers in vLLM's error shape; param names the offending
// request field, or is empty for null.
func writeError(w http.ResponseWriter, status int, errType, message, param string) {
	e := errorInfo{Message: message, Type: errType, Code: status}
	if param != "" {
		e.Param = &param
	}
	writeJSON(w, status, errorResponse{e})
}

func writeLoading(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the model is still loading (--startup-seconds)", "")
}

// vLLM's bucket bounds (vllm/v1/metrics/buckets.py) for TTFT, the gap
// between tokens, and a request's whole latency.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// writeHistogram appends h as prometheus_client writes it (vLLM's labels).
func writeHistogram(b *strings.Builder, h *histogram, name, help, labels string) {
	cum, sum := h.snapshot()
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for i, le := range h.bounds {
		fmt.Fprintf(b, "%s_bucket{le=\"%s\",%s} %d\n", name, strconv.FormatFloat(le, 'f', -1, 64), labels, cum[i])
	}
	total := cum[len(cum)-1]
	fmt.Fprintf(b, "%s_bucket{le=\"+Inf\",%s} %d\n%s_sum{%s} %g\n%s_count{%s} %d\n", name, labels, total, name, labels, sum, name, labels, total)
}

type metrics struct {
	running, waiting               atomic.Int64
	promptTokens, generationTokens atomic.Int64
	requestsFinished               atomic.Int64
	kvTokens                       atomic.Int64 // prompt and generated tokens of the requests being served

	ttft, itl, e2e *histogram

	// http_requests_total as prometheus_fastapi_instrumentator counts it:
	// by route, method and status class ("2xx", "4xx", "5xx").
	httpMu sync.Mutex
	http   map[[3]string]int64
}

func (m *metrics) init() {
	m.ttft, m.itl, m.e2e = newHistogram(ttftBuckets), newHistogram(itlBuckets), newHistogram(e2eBuckets)
	m.http = map[[3]string]int64{}
}

func (m *metrics) observeTTFT(d time.Duration) { m.ttft.observe(d.Seconds()) }

func (m *metrics) countHTTP(handler, method, status string) {
	key := [3]string{handler, method, status}
	m.httpMu.Lock()
	m.http[key]++
	m.httpMu.Unlock()
}

type httpCount struct {
	route, method, status string
	n                     int64
}

// httpCounts is the HTTP counter's series, in a stable order.
func (m *metrics) httpCounts() []httpCount {
	m.httpMu.Lock()
	defer m.httpMu.Unlock()
	out := make([]httpCount, 0, len(m.http))
	for k, n := range m.http {
		out = append(out, httpCount{k[0], k[1], k[2], n})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].route+" "+out[i].method+" "+out[i].status < out[j].route+" "+out[j].method+" "+out[j].status
	})
	return out
}

// kvUsage is the fraction of the KV cache in use: the tokens of the requests
// being served over what max-num-seqs requests of max-model-len would hold.
func (s *server) kvUsage() float64 {
	return float64(s.m.kvTokens.Load()) / (float64(s.cfg.maxNumSeqs) * float64(s.cfg.maxModelLen))
}

// statusRecorder remembers the status a handler wrote; Unwrap lets
// http.ResponseController flush through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrumented counts every answer in the engine's HTTP counter (vLLM's
// http_requests_total, SGLang's sglang:http_responses_total), by the route's
// path ("none" for a path no route of mux serves); handler (default mux)
// answers. Engines without such a counter get handler as it is.
func (s *server) instrumented(mux *http.ServeMux, handler ...http.Handler) http.Handler {
	var next http.Handler = mux
	if len(handler) > 0 {
		next = handler[0]
	}
	if s.eng.httpStatus == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := "none"
		if _, pattern := mux.Handler(r); pattern != "" {
			_, path, _ := strings.Cut(pattern, " ")
			route = path
		}
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.m.countHTTP(route, r.Method, s.eng.httpStatus(status))
		}()
		next.ServeHTTP(rec, r)
	})
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	labels := fmt.Sprintf(`model_name=%s,engine="0"`, strconv.Quote(s.cfg.model))
	var b strings.Builder
	metric := func(name, kind, help, sample string, v int64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %d\n", name, help, name, kind, sample, labels, v)
	}
	metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "vllm:num_requests_running", s.m.running.Load())
	metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "vllm:num_requests_waiting", s.m.waiting.Load())
	metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "vllm:prompt_tokens_total", s.m.promptTokens.Load())
	metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.", "vllm:generation_tokens_total", s.m.generationTokens.Load())
	fmt.Fprintf(&b, "# HELP vllm:request_success Count of successfully processed requests.\n# TYPE vllm:request_success counter\n"+
		"vllm:request_success_total{finished_reason=\"length\",%s} %d\n", labels, s.m.requestsFinished.Load())

	writeHistogram(&b, s.m.ttft, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels)
	writeHistogram(&b, s.m.itl, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels)
	writeHistogram(&b, s.m.e2e, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels)
	fmt.Fprintf(&b, "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n# TYPE vllm:kv_cache_usage_perc gauge\n"+
		"vllm:kv_cache_usage_perc{%s} %g\n", labels, s.kvUsage())
	b.WriteString("# HELP http_requests_total Total number of requests by method, status and handler.\n# TYPE http_requests_total counter\n")
	for _, c := range s.m.httpCounts() {
		fmt.Fprintf(&b, "http_requests_total{handler=%s,method=%s,status=%s} %d\n", strconv.Quote(c.route), strconv.Quote(c.method), strconv.Quote(c.status), c.n)
	}

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}
