package main

// SGLang (python -m sglang.launch_server), read from the sglang 0.5.23 wheel:
// sglang/srt/entrypoints/http_server.py (routes, health, warmup, startup),
// sglang/srt/entrypoints/openai/serving_base.py (errors),
// serving_chat.py and serving_completions.py (streams), sse_utils.py (chunk
// encoding), protocol.py (response models), utils.py (should_include_usage),
// sglang/srt/managers/tokenizer_manager.py (length checks) and
// sglang/srt/observability/metrics_collector.py (metric names and buckets).

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// sglangWarmupTokens: http_server.py _execute_server_warmup sends one
// /generate with max_new_tokens 8 and only then sets ServerStatus.Up.
const sglangWarmupTokens = 8

var sglangEngine = &engine{
	name: engineSGLang,
	// launch_server runs Engine._launch_subprocesses, which blocks until the
	// schedulers have loaded the weights, before uvicorn binds the port.
	bindAfterLoad: true,
	warmupTokens:  sglangWarmupTokens,
	register:      registerSGLang,
	unrouted:      fastAPIUnrouted,
	decode:        sglangDecode,
	// The request's model is echoed, never checked (serving_chat.py uses
	// request.model; "base:adapter" would pick a LoRA adapter).
	checkModel: false,
	limit:      sglangLimit,
	// serving_chat.py _handle_streaming_request awaits the generator's first
	// chunk before returning the StreamingResponse: validation errors are a
	// plain HTTP 400 and the 200 leaves with the first chunk.
	headersAtFirstToken: true,
	fail:                sglangFail,
	streamHeaders: func(h http.Header, j *job) {
		h.Set("Content-Type", "text/event-stream; charset=utf-8") // Starlette adds the charset
	},
	prepare: func(s *server, j *job, req *completionRequest) {
		// The chunk id is the request's rid, uuid4().hex (io_struct.py).
		j.id = strings.TrimPrefix(j.id, j.api.idPrefix)
		// utils.py should_include_usage: include_usage defaults to false.
		j.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil && *req.StreamOptions.IncludeUsage
		j.modelJSON = quote(requestModel(req, "default")) // protocol.py DEFAULT_MODEL_NAME
		j.head = `data: {"id":"` + j.id + `","object":"` + j.api.chunkObject + `","created":` +
			strconv.FormatInt(j.created, 10) + `,"model":` + j.modelJSON + `,"choices":[`
	},
	framers: map[*api]framer{chatAPI: sglangChatFramer{}, completionsAPI: sglangTextFramer{}},
	respond: sglangRespond,
	histograms: func(config) map[string][]float64 {
		// metrics_collector.py defaults.
		return map[string][]float64{
			"ttft": {0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400},
			"itl":  {0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8},
			"e2e":  {0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400},
		}
	},
	// observability/http_request_metrics.py: sglang:http_responses_total by
	// endpoint, method and the exact status code.
	httpStatus: strconv.Itoa,
}

func registerSGLang(s *server, mux *http.ServeMux) {
	// http_server.py health_generate serves both routes: 503 while the
	// server is Starting (until the warmup request finished). /health then
	// answers 200 at once (unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION);
	// /health_generate runs a one-token generation and polls once a second
	// for output, so it takes at least a second.
	healthy := func(w http.ResponseWriter) bool {
		if s.cfg.fault == faultHealthFail || s.warming(time.Now()) {
			w.WriteHeader(http.StatusServiceUnavailable) // Response(status_code=503): empty body
			return false
		}
		return true
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if healthy(w) {
			w.WriteHeader(http.StatusOK)
		}
	})
	mux.HandleFunc("GET /health_generate", func(w http.ResponseWriter, r *http.Request) {
		if !healthy(w) {
			return
		}
		wait := time.Second
		for s.m.running.Load() == 0 && wait < s.cfg.ttft {
			wait += time.Second // no other output arrives to prove the engine alive
		}
		select {
		case <-time.After(wait):
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if s.warming(time.Now()) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	modelInfo := func(w http.ResponseWriter, r *http.Request) {
		writeObj(w, http.StatusOK, obj{
			{"model_path", s.cfg.model}, {"served_model_name", s.cfg.model}, {"tokenizer_path", s.cfg.model},
			{"is_generation", true}, {"preferred_sampling_params", nil}, {"weight_version", "default"},
			{"load_format", "auto"}, {"reasoning_parser", nil}, {"tool_call_parser", nil},
			{"disaggregation_mode", "null"}, {"has_image_understanding", false}, {"has_audio_understanding", false},
			{"model_type", nil}, {"architectures", nil},
		})
	}
	mux.HandleFunc("GET /get_model_info", modelInfo) // deprecated alias of /model_info
	mux.HandleFunc("GET /model_info", modelInfo)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		// protocol.py ModelCard; http_server.py available_models.
		writeObj(w, http.StatusOK, obj{{"object", "list"}, {"data", []any{obj{
			{"id", s.cfg.model}, {"object", "model"}, {"created", time.Now().Unix()}, {"owned_by", "sglang"},
			{"root", s.cfg.model}, {"parent", nil}, {"max_model_len", s.cfg.maxModelLen},
		}}}})
	})
	mux.HandleFunc("GET /metrics", s.sglangMetrics)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, chatAPI) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, completionsAPI) })
}

// sglangDecode: validate_json_request rejects a non-JSON Content-Type, and
// FastAPI's RequestValidationError becomes a 400 whose type is "Bad Request"
// (http_server.py validation_exception_handler). The message for a
// malformed body is approximate: FastAPI lists pydantic's errors.
func sglangDecode(r *http.Request, body []byte, a *api) (completionRequest, *apiError) {
	var req completionRequest
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		errs := `{'loc': ['header', 'content-type'], 'msg': "Unsupported Media Type: Only 'application/json' is allowed", 'type': 'value_error'}`
		return req, openAIError(http.StatusBadRequest, "Bad Request", "1 validation error:\n  "+errs+" ["+errs+"]")
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, openAIError(http.StatusBadRequest, "Bad Request", "JSON decode error: "+err.Error())
	}
	return req, nil
}

// sglangLimit is tokenizer_manager.py _validate_one_request: the input alone
// must be shorter than the context; input + max_new_tokens is checked only
// when the request sets a maximum.
func sglangLimit(s *server, j *job, explicit bool) *verdict {
	if j.maxTokens < 1 {
		return &verdict{msg: "max_tokens must be positive"} // protocol.py validate_max_tokens_positive
	}
	L := s.cfg.maxModelLen
	if j.promptTokens >= L {
		return &verdict{msg: fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", j.promptTokens, L)}
	}
	if total := j.promptTokens + j.maxTokens; explicit && total > L {
		return &verdict{msg: fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. "+
			"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. "+
			"Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			L, total, j.promptTokens, j.maxTokens)}
	}
	return nil
}

// sglangFail is serving_base.py create_error_response: ValueErrors are 400
// "BadRequestError", other exceptions 500 "InternalServerError" with the
// message prefixed "Internal server error: ".
func sglangFail(kind errorKind, msg, param string) *apiError {
	switch kind {
	case errInternal, errMidGeneration:
		return openAIError(http.StatusInternalServerError, "InternalServerError", "Internal server error: "+msg)
	case errLoading:
		return openAIError(http.StatusServiceUnavailable, "ServiceUnavailable", msg)
	}
	return openAIError(http.StatusBadRequest, "BadRequestError", msg)
}

// sglangAbort is the error chunk for an aborted request:
// create_streaming_error_response is json.dumps (spaces after ':' and ','),
// the type is the HTTPStatus name.
func sglangAbort(b []byte, msg string) []byte {
	b = append(b, `data: {"error": {"object": "error", "message": `...)
	b = append(b, quote(msg)...)
	return append(b, `, "type": "INTERNAL_SERVER_ERROR", "param": null, "code": 500}}`+"\n\n"...)
}

// sglangUsage is protocol.py UsageInfo as calculate_token_usage fills it;
// exclude_none drops the null details (completion streams' usage chunk).
func sglangUsage(j *job, completion int, excludeNone bool) obj {
	u := obj{{"prompt_tokens", j.promptTokens}, {"total_tokens", j.promptTokens + completion}, {"completion_tokens", completion}}
	if excludeNone {
		return append(u, kv{"reasoning_tokens", 0})
	}
	return append(u, kv{"prompt_tokens_details", nil}, kv{"reasoning_tokens", 0}, kv{"completion_tokens_details", nil})
}

func sglangUsageChunk(b []byte, j *job, completion int) []byte {
	b = append(b, j.head...)
	b = append(b, `],"usage":`...)
	b = append(b, marshal(sglangUsage(j, completion, j.api != chatAPI))...)
	return append(b, "}\n\n"...)
}

// sglangChatFramer: serving_chat.py _generate_chat_stream with sse_utils.py
// build_sse_content (msgspec, omit_defaults: no "usage" key, delta always has
// reasoning_content). A role chunk precedes the first token; content chunks
// never carry finish_reason; after the last token come a finish_reason chunk,
// the usage chunk (choices []) if include_usage, and [DONE].
type sglangChatFramer struct{}

func (sglangChatFramer) first(b []byte, j *job) []byte {
	b = append(b, j.head...)
	return append(b, `{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`+"\n\n"...)
}

func (sglangChatFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, j.head...)
	b = append(b, `{"index":0,"delta":{"reasoning_content":null,"content":"`...)
	b = append(b, token(i)...)
	return append(b, `"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`+"\n\n"...)
}

func (sglangChatFramer) trailer(b []byte, j *job) []byte {
	b = append(b, j.head...)
	b = append(b, `{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"length","matched_stop":null}]}`+"\n\n"...)
	if j.includeUsage {
		b = sglangUsageChunk(b, j, j.maxTokens)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// abort: an abort with a status code is an error chunk; the loop breaks, no
// finish chunk follows, but the usage chunk and [DONE] still do.
func (sglangChatFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	b = sglangAbort(b, "simulated engine failure mid-stream")
	if j.includeUsage {
		b = sglangUsageChunk(b, j, sent)
	}
	return append(b, "data: [DONE]\n\n"...), true
}

func (sglangChatFramer) inBandError(b []byte, j *job, msg string) []byte { return b }

// sglangTextFramer: serving_completions.py _generate_completion_stream,
// pydantic CompletionStreamResponse (every chunk has "usage":null and
// matched_stop; the last token's chunk has finish_reason), then a usage
// chunk dumped with exclude_none if include_usage, then [DONE].
type sglangTextFramer struct{}

func (sglangTextFramer) first(b []byte, j *job) []byte { return b }

func (sglangTextFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, j.head...)
	b = append(b, `{"index":0,"text":"`...)
	b = append(b, token(i)...)
	if i == j.maxTokens-1 {
		return append(b, `","logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":null}`+"\n\n"...)
	}
	return append(b, `","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`+"\n\n"...)
}

func (sglangTextFramer) trailer(b []byte, j *job) []byte {
	if j.includeUsage {
		b = sglangUsageChunk(b, j, j.maxTokens)
	}
	return append(b, "data: [DONE]\n\n"...)
}

func (sglangTextFramer) abort(b []byte, j *job, sent int) ([]byte, bool) {
	return sglangChatFramer{}.abort(b, j, sent)
}

func (sglangTextFramer) inBandError(b []byte, j *job, msg string) []byte { return b }

// sglangRespond: protocol.py ChatCompletionResponse / CompletionResponse as
// FastAPI serializes them (nulls kept; tool_calls, sglext and the like
// dropped by their model_serializers).
func sglangRespond(s *server, w http.ResponseWriter, j *job, text string) {
	c := obj{{"index", 0}}
	if j.api == chatAPI {
		c = append(c, kv{"message", obj{{"role", "assistant"}, {"content", text}, {"reasoning_content", nil}}})
	} else {
		c = append(c, kv{"text", text})
	}
	c = append(c, kv{"logprobs", nil}, kv{"finish_reason", "length"}, kv{"matched_stop", nil})
	writeObj(w, http.StatusOK, obj{
		{"id", j.id}, {"object", j.api.object}, {"created", j.created}, {"model", json.RawMessage(j.modelJSON)},
		{"choices", []any{c}}, {"usage", sglangUsage(j, j.maxTokens, false)}, {"metadata", nil},
	})
}

// sglangMetrics: metrics_collector.py names, as prometheus_client's
// multiprocess collector exposes them. Scheduler gauges carry the scheduler
// labels; the tokenizer's counters and histograms add is_streaming and
// appear per value once a request of that kind finished. (SGLang serves
// /metrics only with --enable-metrics; the simulator always does.)
func (s *server) sglangMetrics(w http.ResponseWriter, r *http.Request) {
	var p pyProm
	sched := map[string]string{"engine_type": "unified", "model_name": s.cfg.model, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
	tok := map[string]string{"engine_type": "unified", "model_name": s.cfg.model}
	p.family("sglang:num_running_reqs", "gauge")
	p.sample("sglang:num_running_reqs", sched, float64(s.m.running.Load()))
	p.family("sglang:num_queue_reqs", "gauge")
	p.sample("sglang:num_queue_reqs", sched, float64(s.m.waiting.Load()))
	// The KV pool's used fraction, as the simulator counts it (see metrics.kvTokens).
	p.family("sglang:token_usage", "gauge")
	p.sample("sglang:token_usage", sched, s.kvUsage())
	x := &s.x
	streaming := func(i int) map[string]string { return withLabel(tok, "is_streaming", []string{"false", "true"}[i]) }
	for _, c := range []struct {
		name string
		v    *[2]atomic.Int64
	}{{"sglang:prompt_tokens_total", &x.prompt}, {"sglang:generation_tokens_total", &x.generated}, {"sglang:num_requests_total", &x.finished}} {
		p.family(c.name, "counter")
		for i := range 2 {
			if x.finished[i].Load() > 0 {
				p.sample(c.name, streaming(i), float64(c.v[i].Load()))
			}
		}
	}
	for _, h := range []struct{ name, key string }{{"sglang:time_to_first_token_seconds", "ttft"}, {"sglang:e2e_request_latency_seconds", "e2e"}} {
		p.family(h.name, "histogram")
		for i := range 2 {
			hist := x.hists[h.key][i]
			if cum, sum := hist.snapshot(); cum[len(cum)-1] > 0 {
				p.histogram(h.name, streaming(i), hist.bounds, cum, sum)
			}
		}
	}
	// The gap between tokens carries no is_streaming label.
	p.family("sglang:inter_token_latency_seconds", "histogram")
	if cum, sum := x.merged("itl"); cum[len(cum)-1] > 0 {
		p.histogram("sglang:inter_token_latency_seconds", tok, x.hists["itl"][0].bounds, cum, sum)
	}
	p.family("sglang:http_responses_total", "counter")
	for _, c := range s.m.httpCounts() {
		p.sample("sglang:http_responses_total", map[string]string{"endpoint": c.route, "method": c.method, "status_code": c.status}, float64(c.n))
	}
	p.write(w)
}
