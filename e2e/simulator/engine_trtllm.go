package main

// NVIDIA TensorRT-LLM's trtllm-serve (1.x, PyTorch backend), read from
// github.com/NVIDIA/TensorRT-LLM: tensorrt_llm/serve/openai_server.py
// (routes, health, errors, stream generators), openai_protocol.py (request
// and response models, extra="forbid"), postprocess_handlers.py (chunk
// framing), metrics/collector.py (Prometheus names and buckets) and
// serve/readiness.py (which records that the port is not listening while
// the model loads).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// trtllmVersion is the newest tensorrt-llm release on PyPI when this was
// written; /version reports it.
const trtllmVersion = "1.2.1"

var trtllmEngine = &engine{
	name: engineTRTLLM,
	// trtllm-serve builds the LLM (loads the weights) before uvicorn listens:
	// a connection is refused until then (readiness.py: "the socket was bound
	// but never listen()-ed until generator init finished").
	bindAfterLoad: true,
	register:      registerTRTLLM,
	unrouted:      fastAPIUnrouted,
	decode:        trtllmDecode,
	// The model field is required but never checked against the served one;
	// chunks echo it (postprocess_handlers.py args.model = request.model).
	checkModel: false,
	limit:      trtllmLimit,
	fail:       trtllmFail,
	streamHeaders: func(h http.Header, j *job) {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	},
	prepare: func(s *server, j *job, req *completionRequest) {
		// StreamOptions.include_usage defaults to true, so stream_options
		// alone asks for usage (openai_protocol.py), as in vLLM.
		j.modelJSON = quote(req.Model)
		if !j.stream {
			return // non-streaming ids are chatcmpl-/cmpl- + uuid4 hex
		}
		// _ensure_stream_metadata: f"{prefix}-{rsp.id}", the executor's
		// request id, the same for every chunk of the stream.
		seq, _ := strconv.ParseUint(j.id[len(j.id)-16:], 16, 64)
		j.id = j.api.idPrefix + strconv.FormatUint(seq, 10)
		j.head = `data: {"id":"` + j.id + `","object":"` + j.api.chunkObject + `","created":` +
			strconv.FormatInt(j.created, 10) + `,"model":` + j.modelJSON + `,"choices":[`
	},
	framers: map[*api]framer{chatAPI: trtllmChatFramer{}, completionsAPI: trtllmTextFramer{}},
	respond: trtllmRespond,
	histograms: func(config) map[string][]float64 {
		long := []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
		return map[string][]float64{ // metrics/collector.py defaults
			"ttft":  {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
			"e2e":   long,
			"queue": long,
			"tpot":  {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0},
		}
	},
}

func registerTRTLLM(s *server, mux *http.ServeMux) {
	// openai_server.py register_routes.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.fault == faultHealthFail {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("LLM is unavailable. Please check the server logs for more details."))
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /health_generate", func(w http.ResponseWriter, r *http.Request) {
		// A one-token chat completion through the normal path.
		if s.cfg.fault == faultHealthFail {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("Generation health check failed"))
			return
		}
		select {
		case <-time.After(s.cfg.ttft):
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("Generation health check OK"))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeObj(w, http.StatusOK, obj{{"version", trtllmVersion}})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeObj(w, http.StatusOK, obj{{"object", "list"}, {"data", []any{
			obj{{"id", s.cfg.model}, {"object", "model"}, {"created", time.Now().Unix()}, {"owned_by", "tensorrt_llm"}},
		}}})
	})
	mux.HandleFunc("GET /metrics", s.trtllmIterationStats)
	mux.HandleFunc("GET /perf_metrics", func(w http.ResponseWriter, r *http.Request) { writeObj(w, http.StatusOK, []any{}) })
	mux.HandleFunc("GET /prometheus/metrics", s.trtllmPrometheus)
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, chatAPI) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, completionsAPI) })
}

// trtllmFields are the fields of openai_protocol.py ChatCompletionRequest and
// CompletionRequest. OpenAIBaseModel forbids any other field. For chat,
// max_completion_tokens has validation_alias "max_tokens" with
// populate_by_name, so pydantic takes max_tokens when present, and a
// max_completion_tokens beside it is then an extra input.
var trtllmFields = map[*api][]string{
	chatAPI: {"messages", "prompt_token_ids", "prompt_token_ids_b64", "model", "frequency_penalty", "logit_bias",
		"logprobs", "top_logprobs", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed",
		"stop", "stream", "stream_options", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls",
		"user", "reasoning_effort", "thinking", "thinking_token_budget", "prompt_ignore_length", "best_of",
		"use_beam_search", "top_k", "top_p_min", "min_p", "repetition_penalty", "length_penalty", "early_stopping",
		"stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
		"spaces_between_special_tokens", "truncate_prompt_tokens", "lora_request", "echo", "add_generation_prompt",
		"add_special_tokens", "documents", "chat_template", "chat_template_kwargs", "injected_chat_template_kwargs",
		"media_io_kwargs", "disaggregated_params", "conversation_params", "cache_salt", "priority",
		"agent_hierarchy", "mm_processor_kwargs"},
	completionsAPI: {"model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
		"max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature",
		"top_p", "user", "lora_request", "prompt_ignore_length", "use_beam_search", "top_k", "top_p_min", "min_p",
		"repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids", "include_stop_str_in_output",
		"ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
		"truncate_prompt_tokens", "return_context_logits", "detokenize", "thinking_token_budget",
		"add_special_tokens", "response_format", "disaggregated_params", "priority", "conversation_params"},
}

// trtllmRequired are the fields without a default, in model order.
var trtllmRequired = map[*api][]string{chatAPI: {"messages", "model"}, completionsAPI: {"model", "prompt"}}

// trtllmDecode applies pydantic's validation as FastAPI reports it, through
// openai_server.py's handler: 400 {"error": str(RequestValidationError)}.
func trtllmDecode(r *http.Request, body []byte, a *api) (completionRequest, *apiError) {
	var req completionRequest
	var errs []string
	keys, ok := topLevelKeys(body)
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		errs = append(errs, fmt.Sprintf("{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': %s}}", pyString(err.Error())))
	} else if !ok {
		errs = append(errs, fmt.Sprintf("{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': %s}", pyRepr(body)))
	} else {
		present := map[string]bool{}
		for _, k := range keys {
			present[k.name] = true
		}
		for _, f := range trtllmRequired[a] {
			if !present[f] {
				errs = append(errs, fmt.Sprintf("{'type': 'missing', 'loc': ('body', '%s'), 'msg': 'Field required', 'input': %s}", f, pyRepr(body)))
			}
		}
		known := map[string]bool{}
		for _, f := range trtllmFields[a] {
			known[f] = true
		}
		if a == chatAPI {
			known["max_tokens"] = true
			if present["max_tokens"] {
				known["max_completion_tokens"] = false // the alias won; the name is left over
			}
		}
		for _, k := range keys {
			if !known[k.name] {
				errs = append(errs, fmt.Sprintf("{'type': 'extra_forbidden', 'loc': ('body', %s), 'msg': 'Extra inputs are not permitted', 'input': %s}", pyString(k.name), pyRepr(k.raw)))
			}
		}
	}
	if len(errs) > 0 {
		plural := "s"
		if len(errs) == 1 {
			plural = ""
		}
		msg := fmt.Sprintf("%d validation error%s:\n  %s", len(errs), plural, strings.Join(errs, "\n  "))
		return req, jsonError(http.StatusBadRequest, obj{{"error", msg}})
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, jsonError(http.StatusBadRequest, obj{{"error", "1 validation error:\n  " + err.Error()}})
	}
	if a == chatAPI && req.MaxTokens != nil {
		req.MaxCompletionTokens = req.MaxTokens
	}
	return req, nil
}

// trtllmLimit: the PyTorch backend deduces the room left in max_seq_len
// (executor/base_worker.py _deduce_max_tokens): a prompt that leaves none is
// an error raised in the worker, which a stream meets only after its 200; a
// max_tokens beyond the room is lowered to it with a warning, not rejected.
func trtllmLimit(s *server, j *job, explicit bool) *verdict {
	if j.maxTokens < 1 {
		return &verdict{msg: fmt.Sprintf("max_tokens must be greater than 0, got %d", j.maxTokens)} // wording approximate
	}
	room := s.cfg.maxModelLen - j.promptTokens
	if room <= 0 {
		return &verdict{late: true, msg: fmt.Sprintf("`default_max_tokens` (%d) must be greater than 0, `default_max_tokens` (%d) = max_seq_len (%d) - `splited_prompt_len` (%d) - `query_token_len` (0)",
			room, room, s.cfg.maxModelLen, j.promptTokens)}
	}
	j.maxTokens = min(j.maxTokens, room)
	return nil
}

// trtllmFail is OpenAIServer.create_error_response: every exception in a
// handler becomes a 400 "BadRequestError" ErrorResponse. The simulator keeps
// --fault http500 a 500, in the same shape.
func trtllmFail(kind errorKind, msg, param string) *apiError {
	if kind == errInternal {
		return openAIError(http.StatusInternalServerError, "InternalServerError", msg)
	}
	return openAIError(http.StatusBadRequest, "BadRequestError", msg)
}

func trtllmUsage(j *job) obj {
	return obj{{"prompt_tokens", j.promptTokens}, {"total_tokens", j.promptTokens + j.maxTokens},
		{"completion_tokens", j.maxTokens}, {"prompt_tokens_details", obj{{"cached_tokens", 0}}}}
}

// trtllmUsageChunk: the final usage chunk is dumped without exclude_none.
func trtllmUsageChunk(b []byte, j *job) []byte {
	b = append(b, j.head...)
	b = append(b, `],"usage":`...)
	b = append(b, marshal(trtllmUsage(j))...)
	return append(b, "}\n\n"...)
}

// trtllmChatFramer: postprocess_handlers.py chat_stream_post_processor.
// Chunks are dumped with exclude_none (no usage, logprobs or null
// finish_reason keys); the role chunk is written f"data: {...} \n\n", with a
// space before the blank line, and goes out with the first token; the last
// token's chunk carries finish_reason; usage (choices []) if stream_options
// asks for it; [DONE] from openai_server.py chat_stream_generator.
type trtllmChatFramer struct{}

func (trtllmChatFramer) first(b []byte, j *job) []byte {
	b = append(b, j.head...)
	return append(b, `{"index":0,"delta":{"role":"assistant"}}]} `+"\n\n"...)
}

func (trtllmChatFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, j.head...)
	b = append(b, `{"index":0,"delta":{"content":"`...)
	b = append(b, token(i)...)
	if i == j.maxTokens-1 {
		return append(b, `"},"finish_reason":"length"}]}`+"\n\n"...)
	}
	return append(b, `"}}]}`+"\n\n"...)
}

func (trtllmChatFramer) trailer(b []byte, j *job) []byte {
	if j.includeUsage {
		b = trtllmUsageChunk(b, j)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// abort: an exception in the stream generator propagates out of Starlette's
// StreamingResponse; the connection is closed mid-body, with no error event
// and no [DONE].
func (trtllmChatFramer) abort(b []byte, j *job, sent int) ([]byte, bool) { return b, false }

func (trtllmChatFramer) inBandError(b []byte, j *job, msg string) []byte { return b }

// trtllmTextFramer: completion_stream_post_processor dumps every chunk in
// full (exclude_unset=False, so the nulls and "usage":null stay).
type trtllmTextFramer struct{}

func (trtllmTextFramer) first(b []byte, j *job) []byte { return b }

func (trtllmTextFramer) token(b []byte, j *job, i int) []byte {
	b = append(b, j.head...)
	b = append(b, `{"index":0,"text":"`...)
	b = append(b, token(i)...)
	finish := "null"
	if i == j.maxTokens-1 {
		finish = `"length"`
	}
	b = append(b, `","token_ids":null,"logprobs":null,"finish_reason":`...)
	b = append(b, finish...)
	return append(b, `,"stop_reason":null,"avg_decoded_tokens_per_iter":null}],"usage":null}`+"\n\n"...)
}

func (trtllmTextFramer) trailer(b []byte, j *job) []byte { return trtllmChatFramer{}.trailer(b, j) }

func (trtllmTextFramer) abort(b []byte, j *job, sent int) ([]byte, bool) { return b, false }

func (trtllmTextFramer) inBandError(b []byte, j *job, msg string) []byte { return b }

// trtllmRespond: ChatCompletionResponse / CompletionResponse.model_dump()
// through JSONResponse: every field, nulls included.
func trtllmRespond(s *server, w http.ResponseWriter, j *job, text string) {
	if j.api == chatAPI {
		writeObj(w, http.StatusOK, obj{
			{"id", j.id}, {"object", "chat.completion"}, {"created", j.created}, {"model", json.RawMessage(j.modelJSON)},
			{"choices", []any{obj{
				{"index", 0},
				{"message", obj{{"role", "assistant"}, {"content", text}, {"reasoning_content", nil}, {"reasoning", nil}, {"tool_calls", []any{}}}},
				{"logprobs", nil}, {"finish_reason", "length"}, {"stop_reason", nil}, {"mm_embedding_handle", nil},
				{"disaggregated_params", nil}, {"avg_decoded_tokens_per_iter", nil},
			}}},
			{"usage", trtllmUsage(j)}, {"prompt_token_ids", nil}, {"prompt_token_ids_b64", nil},
		})
		return
	}
	writeObj(w, http.StatusOK, obj{
		{"id", j.id}, {"object", "text_completion"}, {"created", j.created}, {"model", json.RawMessage(j.modelJSON)},
		{"choices", []any{obj{
			{"index", 0}, {"text", text}, {"token_ids", nil}, {"logprobs", nil}, {"context_logits", nil},
			{"finish_reason", "length"}, {"stop_reason", nil}, {"disaggregated_params", nil}, {"avg_decoded_tokens_per_iter", nil},
		}}},
		{"usage", trtllmUsage(j)}, {"prompt_token_ids", nil},
	})
}

// trtllmIterationStats is /metrics: openai_server.py get_iteration_stats
// returns the executor's iteration statistics gathered since the last call
// as a JSON list, [] when no iteration ran. The simulator reports one entry
// per scrape that saw activity, with the counts a client reads (a subset of
// the real fields).
func (s *server) trtllmIterationStats(w http.ResponseWriter, r *http.Request) {
	x := &s.x
	x.statsMu.Lock()
	done := x.total(&x.finished)
	completed := done - x.lastStats
	x.lastStats = done
	x.statsMu.Unlock()
	running, waiting := s.m.running.Load(), s.m.waiting.Load()
	stats := []any{}
	if running > 0 || waiting > 0 || completed > 0 {
		stats = append(stats, obj{
			{"iter", s.nextID.Load()}, {"iterLatencyMS", float64(s.cfg.itl) / float64(time.Millisecond)},
			{"maxNumActiveRequests", s.cfg.maxNumSeqs}, {"numActiveRequests", running},
			{"numQueuedRequests", waiting}, {"numCompletedRequests", completed},
			{"inflightBatchingStats", obj{{"numScheduledRequests", running}, {"numContextRequests", 0},
				{"numGenRequests", running}, {"numPausedRequests", 0}, {"numCtxTokens", 0}}},
			{"timestamp", time.Now().Format("01-02-2006 15:04:05")},
		})
	}
	writeObj(w, http.StatusOK, stats)
}

// trtllmPrometheus is /prometheus/metrics, mounted when return_perf_metrics
// is set (the simulator always serves it): the five families of
// metrics/collector.py before the trtllm_ prefix (deployctl's table for
// main-00209af says why that era), with the labels openai_server.py gives
// the collector, through prometheus_client's multiprocess collector.
// Per-request series appear once a request finished.
func (s *server) trtllmPrometheus(w http.ResponseWriter, r *http.Request) {
	var p pyProm
	labels := map[string]string{"engine_type": "undefined", "model_name": "undefined"}
	x := &s.x
	if done := x.total(&x.finished); done > 0 {
		p.family("request_success_total", "counter")
		p.sample("request_success_total", withLabel(labels, "finished_reason", "length"), float64(done))
		for _, h := range []struct{ name, key string }{
			{"time_to_first_token_seconds", "ttft"},
			{"e2e_request_latency_seconds", "e2e"},
			{"time_per_output_token_seconds", "tpot"},
			{"request_queue_time_seconds", "queue"},
		} {
			cum, sum := x.merged(h.key)
			p.family(h.name, "histogram")
			p.histogram(h.name, labels, x.hists[h.key][0].bounds, cum, sum)
		}
	}
	p.write(w)
}
