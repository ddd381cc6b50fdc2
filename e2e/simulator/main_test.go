package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func startSim(t *testing.T, cfg config) *httptest.Server {
	t.Helper()
	if cfg.model == "" {
		cfg.model = "m"
	}
	if cfg.maxNumSeqs == 0 {
		cfg.maxNumSeqs = 256
	}
	if cfg.maxModelLen == 0 {
		cfg.maxModelLen = 4096
	}
	if cfg.fault == "" {
		cfg.fault = faultNone
	}
	ts := httptest.NewServer(newServer(cfg, time.Now()).routes())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestStreamFramingAndSchedule checks the event sequence a vLLM client
// expects and that token i arrives no earlier than ttft + i·itl.
func TestStreamFramingAndSchedule(t *testing.T) {
	const ttft, itl, n = 30 * time.Millisecond, 10 * time.Millisecond, 5
	ts := startSim(t, config{ttft: ttft, itl: itl})
	start := time.Now()
	resp := post(t, ts.URL+"/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}

	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Delta struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	var events []string
	var arrivals []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		events = append(events, data)
		arrivals = append(arrivals, time.Since(start))
	}
	// role chunk, n tokens, usage chunk, [DONE]
	if len(events) != n+3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("got %d events ending %q", len(events), events[len(events)-1])
	}
	var chunks []chunk
	for _, e := range events[:len(events)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		if c.Object != "chat.completion.chunk" || len(chunks) > 0 && c.ID != chunks[0].ID {
			t.Fatalf("event %q: wrong object, or an id unlike the first chunk's", e)
		}
		chunks = append(chunks, c)
	}
	if r := chunks[0].Choices[0].Delta.Role; r == nil || *r != "assistant" {
		t.Errorf("first chunk has no assistant role: %s", events[0])
	}
	var text string
	for i, c := range chunks[1 : n+1] {
		d := c.Choices[0]
		if d.Delta.Content == nil || *d.Delta.Content != token(i) {
			t.Errorf("chunk %d: content %v, want %q", i+1, d.Delta.Content, token(i))
		}
		text += *d.Delta.Content
		if last := i == n-1; last != (d.FinishReason != nil) || last && *d.FinishReason != "length" {
			t.Errorf("chunk %d: finish_reason %v", i+1, d.FinishReason)
		}
		if due := ttft + time.Duration(i)*itl; arrivals[i+1] < due {
			t.Errorf("token %d arrived at %v, before its deadline %v", i, arrivals[i+1], due)
		}
	}
	if text != "The quick brown fox jumps" {
		t.Errorf("text %q", text)
	}
	u := chunks[n+1]
	if len(u.Choices) != 0 || u.Usage == nil || *u.Usage != (usage{PromptTokens: 4, CompletionTokens: n, TotalTokens: 4 + n}) {
		t.Errorf("usage chunk %s", events[n+1])
	}
	// Generous upper bound: the machine running the tests may be busy.
	if last := arrivals[n]; last > ttft+(n-1)*itl+50*time.Millisecond {
		t.Errorf("last token at %v, far behind schedule", last)
	}
}

// TestQueueing checks that requests beyond --max-num-seqs wait for a slot and
// that their schedule starts when they get one.
func TestQueueing(t *testing.T) {
	const ttft = 40 * time.Millisecond
	ts := startSim(t, config{ttft: ttft, maxNumSeqs: 1})
	start := time.Now()
	var wg sync.WaitGroup
	took := make([]time.Duration, 2)
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	slow := max(took[0], took[1])
	if slow < 2*ttft {
		t.Errorf("second request finished after %v; with one slot it needs at least %v", slow, 2*ttft)
	}
}

func TestUnknownModel(t *testing.T) {
	ts := startSim(t, config{})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"hi"}]}`)
	var e errorResponse
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 || e.Error.Type != "NotFoundError" || e.Error.Code != 404 || e.Error.Message != "The model `other` does not exist." {
		t.Errorf("got %d %+v", resp.StatusCode, e)
	}
}

func TestCountTokens(t *testing.T) {
	for text, want := range map[string]int{
		"":                    0,
		"Hello, world!":       4,
		"  two\twords\n":      2,
		"don't stop-me 42x":   7,
		"naïve café, 東京":      4,
		"{\"json\": [1, 2]}":  11,
		"version 1.26.8 done": 7,
	} {
		if got := countTokens(text); got != want {
			t.Errorf("countTokens(%q) = %d, want %d", text, got, want)
		}
	}
}

// ---- engine modes ----

// normalize hides the per-run parts of a stream: created times and ids.
var (
	createdRE = regexp.MustCompile(`"created":\d+`)
	idRE      = regexp.MustCompile(`"id":"[^"]*"`)
)

func normalize(s string) string {
	return idRE.ReplaceAllString(createdRE.ReplaceAllString(s, `"created":C`), `"id":"ID"`)
}

// events splits a finished SSE body into its events, each without the blank
// line that ends it.
func events(body string) []string {
	return strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
}

func startEngine(t *testing.T, engine string, cfg config) *httptest.Server {
	t.Helper()
	cfg.engine = engine
	return startSim(t, cfg)
}

func do(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, string(b)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`

func TestParseEngine(t *testing.T) {
	cfg, err := parseFlags([]string{"--model", "m"})
	if err != nil || cfg.engine != engineVLLM {
		t.Fatalf("default engine %q, %v", cfg.engine, err)
	}
	for _, e := range engineNames {
		if cfg, err := parseFlags([]string{"--model", "m", "--engine", e}); err != nil || cfg.engine != e {
			t.Errorf("--engine %s: %q, %v", e, cfg.engine, err)
		}
	}
	if _, err := parseFlags([]string{"--model", "m", "--engine", "triton"}); err == nil {
		t.Error("--engine triton accepted")
	}
}

// TestEngineRoutes checks which routes each engine serves and how it
// answers routes it does not have.
func TestEngineRoutes(t *testing.T) {
	type route struct {
		method, path, body string
		status             int
		want               string // exact body, when not empty
	}
	gen := `{"inputs":"Hello","parameters":{"max_new_tokens":2}}`
	for engine, routes := range map[string][]route{
		engineVLLM: {
			{"GET", "/health", "", 200, ""}, {"GET", "/v1/models", "", 200, ""}, {"GET", "/metrics", "", 200, ""},
			{"GET", "/info", "", 404, "404 page not found\n"}, {"GET", "/health_generate", "", 404, ""},
		},
		engineTGI: {
			{"GET", "/health", "", 200, ""}, {"GET", "/ping", "", 200, ""}, {"GET", "/", "", 200, ""},
			{"GET", "/v1/models", "", 200, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"m"}]}`},
			{"GET", "/metrics", "", 200, ""},
			{"POST", "/generate", gen, 200, `{"generated_text":"The quick"}`},
			{"POST", "/", gen, 200, `[{"generated_text":"The quick"}]`},
			{"POST", "/generate_stream", gen, 200, ""},
			{"GET", "/nope", "", 404, "-"}, {"GET", "/generate", "", 405, "-"},
			{"GET", "/version", "", 404, "-"}, {"GET", "/health_generate", "", 404, "-"},
		},
		engineSGLang: {
			{"GET", "/health", "", 200, "-"}, {"GET", "/health_generate", "", 200, "-"}, {"GET", "/ready", "", 200, "-"},
			{"GET", "/get_model_info", "", 200, ""}, {"GET", "/model_info", "", 200, ""},
			{"GET", "/v1/models", "", 200, ""}, {"GET", "/metrics", "", 200, ""},
			{"GET", "/nope", "", 404, `{"detail":"Not Found"}`},
			{"GET", "/v1/chat/completions", "", 405, `{"detail":"Method Not Allowed"}`},
			{"GET", "/info", "", 404, `{"detail":"Not Found"}`},
		},
		engineTRTLLM: {
			{"GET", "/health", "", 200, "-"}, {"GET", "/health_generate", "", 200, "Generation health check OK"},
			{"GET", "/version", "", 200, `{"version":"` + trtllmVersion + `"}`},
			{"GET", "/v1/models", "", 200, ""}, {"GET", "/metrics", "", 200, "[]"}, {"GET", "/perf_metrics", "", 200, "[]"},
			{"GET", "/prometheus/metrics", "", 200, ""},
			{"GET", "/nope", "", 404, `{"detail":"Not Found"}`}, {"GET", "/info", "", 404, `{"detail":"Not Found"}`},
		},
	} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ts := startEngine(t, engine, config{})
			for _, r := range routes {
				resp, body := do(t, r.method, ts.URL+r.path, r.body)
				if resp.StatusCode != r.status {
					t.Errorf("%s %s: %d, want %d (%q)", r.method, r.path, resp.StatusCode, r.status, body)
				}
				switch r.want {
				case "":
				case "-":
					if body != "" {
						t.Errorf("%s %s: body %q, want none", r.method, r.path, body)
					}
				default:
					if body != r.want {
						t.Errorf("%s %s: body %q, want %q", r.method, r.path, body, r.want)
					}
				}
			}
		})
	}
}

// freePort finds a port nobody listens on (a small race, fine for tests).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestHealthWhileLoading runs the real listener: vLLM listens during
// --startup-seconds and answers 503; TGI, SGLang and trtllm-serve refuse
// connections until loaded; SGLang then answers 503 until its warmup request
// ran.
func TestHealthWhileLoading(t *testing.T) {
	const startup = 400 * time.Millisecond
	for _, engine := range engineNames {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			cfg := config{host: "127.0.0.1", port: freePort(t), model: "m", ttft: 300 * time.Millisecond, itl: 10 * time.Millisecond,
				maxNumSeqs: 4, maxModelLen: 4096, startup: startup, fault: faultNone, engine: engine}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx, cfg) }()
			t.Cleanup(func() { cancel(); <-done })
			url := fmt.Sprintf("http://127.0.0.1:%d/health", cfg.port)
			start := time.Now()
			time.Sleep(100 * time.Millisecond)

			resp, err := http.Get(url)
			if engine == engineVLLM {
				if err != nil || resp.StatusCode != 503 {
					t.Fatalf("vllm while loading: %v %v, want a 503", resp, err)
				}
				resp.Body.Close()
			} else if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s while loading: %v %v, want connection refused", engine, resp, err)
			}

			var statuses []int
			for time.Since(start) < 3*time.Second {
				if resp, err := http.Get(url); err == nil {
					resp.Body.Close()
					if len(statuses) == 0 || statuses[len(statuses)-1] != resp.StatusCode {
						statuses = append(statuses, resp.StatusCode)
					}
					if resp.StatusCode == 200 {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			want := map[string]string{
				engineVLLM:   "[503 200]",
				engineTGI:    "[200]",
				engineTRTLLM: "[200]",
				engineSGLang: "[503 200]", // warmup: ttft + 7·itl after binding
			}[engine]
			if got := fmt.Sprint(statuses); got != want {
				t.Errorf("health answers after loading %s, want %s", got, want)
			}
			if took := time.Since(start); took < startup {
				t.Errorf("healthy after %v, before --startup-seconds", took)
			}
		})
	}
}

// TestEngineChatStreamFraming checks every event of a chat stream with
// include_usage, per engine.
func TestEngineChatStreamFraming(t *testing.T) {
	const tgiHead = `data: {"object":"chat.completion.chunk","id":"ID","created":C,"model":"m","system_fingerprint":"` + tgiFingerprint + `","choices":[`
	const head = `data: {"id":"ID","object":"chat.completion.chunk","created":C,"model":"m","choices":[`
	for engine, want := range map[string][]string{
		engineVLLM: {
			head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":"The"},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":" quick"},"logprobs":null,"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":" brown"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`,
			head + `],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3}}`,
			`data: [DONE]`,
		},
		engineTGI: {
			tgiHead + `{"index":0,"delta":{"role":"assistant","content":"The"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			tgiHead + `{"index":0,"delta":{"role":"assistant","content":" quick"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			tgiHead + `{"index":0,"delta":{"role":"assistant","content":" brown"},"logprobs":null,"finish_reason":"length"}],"usage":null}`,
			tgiHead + `],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}`,
			`data: [DONE]`,
		},
		engineSGLang: {
			head + `{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`,
			head + `{"index":0,"delta":{"reasoning_content":null,"content":"The"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`,
			head + `{"index":0,"delta":{"reasoning_content":null,"content":" quick"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`,
			head + `{"index":0,"delta":{"reasoning_content":null,"content":" brown"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}`,
			head + `{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"length","matched_stop":null}]}`,
			head + `],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null}}`,
			`data: [DONE]`,
		},
		engineTRTLLM: {
			head + `{"index":0,"delta":{"role":"assistant"}}]} `,
			head + `{"index":0,"delta":{"content":"The"}}]}`,
			head + `{"index":0,"delta":{"content":" quick"}}]}`,
			head + `{"index":0,"delta":{"content":" brown"},"finish_reason":"length"}]}`,
			head + `],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}`,
			`data: [DONE]`,
		},
	} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ts := startEngine(t, engine, config{})
			resp, body := do(t, "POST", ts.URL+"/v1/chat/completions", chatBody)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if !strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Errorf("stream does not end in [DONE]: %q", body)
			}
			got := events(normalize(body))
			if len(got) != len(want) {
				t.Fatalf("%d events, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("event %d:\n got %s\nwant %s", i, got[i], want[i])
				}
			}
			ids := idRE.FindAllString(body, -1)
			idWant := map[string]*regexp.Regexp{
				engineVLLM:   regexp.MustCompile(`^"id":"chatcmpl-[0-9a-f]{32}"$`),
				engineTGI:    regexp.MustCompile(`^"id":""$`),
				engineSGLang: regexp.MustCompile(`^"id":"[0-9a-f]{32}"$`),
				engineTRTLLM: regexp.MustCompile(`^"id":"chatcmpl-[0-9]+"$`),
			}[engine]
			for _, id := range ids {
				if !idWant.MatchString(id) || id != ids[0] {
					t.Errorf("chunk id %s: want every chunk to match %s and the first", id, idWant)
				}
			}
		})
	}
}

// TestEngineUsageOptIn checks when each engine sends the usage chunk.
func TestEngineUsageOptIn(t *testing.T) {
	const base = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true`
	for engine, want := range map[string][3]bool{ // no stream_options, {}, {"include_usage":true}
		engineVLLM:   {false, true, true},
		engineTGI:    {false, false, true},
		engineSGLang: {false, false, true},
		engineTRTLLM: {false, true, true},
	} {
		ts := startEngine(t, engine, config{})
		for i, opts := range []string{``, `,"stream_options":{}`, `,"stream_options":{"include_usage":true}`} {
			_, body := do(t, "POST", ts.URL+"/v1/chat/completions", base+opts+"}")
			if got := strings.Contains(body, `"choices":[],"usage":{`); got != want[i] {
				t.Errorf("%s with %q: usage chunk %v, want %v", engine, opts, got, want[i])
			}
		}
	}
}

// TestEngineCompletionStreams checks /v1/completions streams: TGI puts usage
// in its last chunk whatever stream_options says; the others send a usage
// chunk only when asked.
func TestEngineCompletionStreams(t *testing.T) {
	const body = `{"model":"m","prompt":"Hello, world!","max_tokens":2,"stream":true}`
	tgi := startEngine(t, engineTGI, config{})
	_, got := do(t, "POST", tgi.URL+"/v1/completions", body)
	want := []string{
		`data: {"object":"text_completion","id":"ID","created":C,"choices":[{"index":0,"text":"The","logprobs":null,"finish_reason":""}],"model":"m","system_fingerprint":"` + tgiFingerprint + `"}`,
		`data: {"object":"text_completion","id":"ID","created":C,"model":"m","system_fingerprint":"` + tgiFingerprint + `","choices":[{"index":0,"text":" quick","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`,
		`data: [DONE]`,
	}
	if g := events(normalize(got)); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("tgi completion stream:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	sgl := startEngine(t, engineSGLang, config{})
	_, got = do(t, "POST", sgl.URL+"/v1/completions", strings.TrimSuffix(body, "}")+`,"stream_options":{"include_usage":true}}`)
	want = []string{
		`data: {"id":"ID","object":"text_completion","created":C,"model":"m","choices":[{"index":0,"text":"The","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
		`data: {"id":"ID","object":"text_completion","created":C,"model":"m","choices":[{"index":0,"text":" quick","logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":null}`,
		`data: {"id":"ID","object":"text_completion","created":C,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2,"reasoning_tokens":0}}`,
		`data: [DONE]`,
	}
	if g := events(normalize(got)); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("sglang completion stream:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	trt := startEngine(t, engineTRTLLM, config{})
	_, got = do(t, "POST", trt.URL+"/v1/completions", body)
	want = []string{
		`data: {"id":"ID","object":"text_completion","created":C,"model":"m","choices":[{"index":0,"text":"The","token_ids":null,"logprobs":null,"finish_reason":null,"stop_reason":null,"avg_decoded_tokens_per_iter":null}],"usage":null}`,
		`data: {"id":"ID","object":"text_completion","created":C,"model":"m","choices":[{"index":0,"text":" quick","token_ids":null,"logprobs":null,"finish_reason":"length","stop_reason":null,"avg_decoded_tokens_per_iter":null}],"usage":null}`,
		`data: [DONE]`,
	}
	if g := events(normalize(got)); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("trtllm completion stream:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// TestTGIGenerateStream checks TGI's own stream: StreamResponse events, the
// last with generated_text and details, no [DONE].
func TestTGIGenerateStream(t *testing.T) {
	ts := startEngine(t, engineTGI, config{})
	_, got := do(t, "POST", ts.URL+"/generate_stream", `{"inputs":"Hello, world!","parameters":{"max_new_tokens":2,"details":true}}`)
	want := "data: " + `{"index":1,"token":{"id":1000,"text":"The","logprob":0.0,"special":false},"generated_text":null,"details":null}` + "\n\n" +
		"data: " + `{"index":2,"token":{"id":1001,"text":" quick","logprob":0.0,"special":false},"generated_text":"The quick","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"input_length":4}}` + "\n\n"
	if got != want {
		t.Errorf("generate_stream:\n%q\nwant\n%q", got, want)
	}
}

// TestSGLangHeadersAtFirstToken: SGLang's 200 leaves with the first chunk,
// the others' at once.
func TestSGLangHeadersAtFirstToken(t *testing.T) {
	const ttft = 300 * time.Millisecond
	for _, engine := range engineNames {
		ts := startEngine(t, engine, config{ttft: ttft})
		start := time.Now()
		resp := post(t, ts.URL+"/v1/chat/completions", chatBody)
		took := time.Since(start)
		resp.Body.Close()
		if late := took >= ttft; late != (engine == engineSGLang) {
			t.Errorf("%s: headers after %v (ttft %v)", engine, took, ttft)
		}
	}
}

// TestEngineErrors checks each engine's answer to a request over the
// context length, streaming and not.
func TestEngineErrors(t *testing.T) {
	const over = `{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":10`
	cfg := config{maxModelLen: 8}
	for engine, want := range map[string][2]string{ // non-streaming status+body, streaming status+body
		engineVLLM: {
			`400 {"error":{"message":"This model's maximum context length is 8 tokens. However, you requested 14 tokens (4 in the messages, 10 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`,
			`400 {"error":{"message":"This model's maximum context length is 8 tokens. However, you requested 14 tokens (4 in the messages, 10 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`,
		},
		engineTGI: {
			"422 {\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8. Given: 4 `inputs` tokens and 10 `max_new_tokens`\",\"error_type\":\"validation\"}",
			"200 data: {\"error\":{\"message\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8. Given: 4 `inputs` tokens and 10 `max_new_tokens`\",\"http_status_code\":422}}\n\ndata: [DONE]\n\n",
		},
		engineSGLang: {
			`400 {"object":"error","message":"Requested token count exceeds the model's maximum context length of 8 tokens. You requested a total of 14 tokens: 4 tokens from the input messages and 10 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}`,
			`400 {"object":"error","message":"Requested token count exceeds the model's maximum context length of 8 tokens. You requested a total of 14 tokens: 4 tokens from the input messages and 10 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}`,
		},
	} {
		ts := startEngine(t, engine, cfg)
		for i, stream := range []string{"}", `,"stream":true}`} {
			resp, body := do(t, "POST", ts.URL+"/v1/chat/completions", over+stream)
			if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != want[i] {
				t.Errorf("%s (stream %v):\n got %s\nwant %s", engine, i == 1, got, want[i])
			}
		}
	}

	// trtllm-serve lowers max_tokens to the room left in the context...
	trt := startEngine(t, engineTRTLLM, cfg)
	resp, body := do(t, "POST", trt.URL+"/v1/chat/completions", over+"}")
	var r struct {
		Usage usage `json:"usage"`
	}
	if json.Unmarshal([]byte(body), &r); resp.StatusCode != 200 || r.Usage.CompletionTokens != 4 {
		t.Errorf("trtllm over max_tokens: %d %s, want 200 with 4 completion tokens", resp.StatusCode, body)
	}
	// ...rejects a prompt that fills it with a 400, or drops a stream.
	trt = startEngine(t, engineTRTLLM, config{maxModelLen: 4})
	resp, body = do(t, "POST", trt.URL+"/v1/chat/completions", over+"}")
	const wantTRT = "400 {\"object\":\"error\",\"message\":\"`default_max_tokens` (0) must be greater than 0, `default_max_tokens` (0) = max_seq_len (4) - `splited_prompt_len` (4) - `query_token_len` (0)\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}"
	if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != wantTRT {
		t.Errorf("trtllm full prompt:\n got %s\nwant %s", got, wantTRT)
	}
	sresp := post(t, trt.URL+"/v1/chat/completions", over+`,"stream":true}`)
	if _, err := io.ReadAll(sresp.Body); sresp.StatusCode != 200 || err == nil {
		t.Errorf("trtllm full prompt, streaming: %d, read error %v; want 200 and a cut-off body", sresp.StatusCode, err)
	}
}

// TestMaxTokensTwice: the smoke benchmark sends max_tokens and
// max_completion_tokens together. vLLM and SGLang accept that; TGI (serde
// alias: duplicate field) and trtllm-serve (pydantic alias + extra="forbid")
// reject it.
func TestMaxTokensTwice(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":5,"ignore_eos":true}`
	col := strings.Index(body, `"max_completion_tokens"`) + len(`"max_completion_tokens"`)
	for engine, want := range map[string]string{
		engineVLLM:   "200",
		engineSGLang: "200",
		engineTGI:    fmt.Sprintf("422 text/plain; charset=utf-8 Failed to deserialize the JSON body into the target type: duplicate field `max_tokens` at line 1 column %d", col),
		engineTRTLLM: `400 application/json {"error":"1 validation error:\n  {'type': 'extra_forbidden', 'loc': ('body', 'max_completion_tokens'), 'msg': 'Extra inputs are not permitted', 'input': 5}"}`,
	} {
		ts := startEngine(t, engine, config{})
		resp, got := do(t, "POST", ts.URL+"/v1/chat/completions", body)
		if resp.StatusCode == 200 {
			got = "200"
		} else {
			got = fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", engine, got, want)
		}
	}
	// Either name alone is fine everywhere.
	for _, engine := range engineNames {
		ts := startEngine(t, engine, config{})
		for _, field := range []string{"max_tokens", "max_completion_tokens"} {
			resp, got := do(t, "POST", ts.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"`+field+`":5}`)
			var r struct {
				Usage usage `json:"usage"`
			}
			if json.Unmarshal([]byte(got), &r); resp.StatusCode != 200 || r.Usage.CompletionTokens != 5 {
				t.Errorf("%s with %s alone: %d %s", engine, field, resp.StatusCode, got)
			}
		}
	}
}

// TestEngineFaults checks that every fault mode works in every engine, in
// that engine's error shape.
func TestEngineFaults(t *testing.T) {
	const body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`
	http500 := map[string]string{
		engineVLLM:   `{"error":{"message":"simulated engine failure","type":"InternalServerError","param":null,"code":500}}`,
		engineTGI:    `{"error":"Incomplete generation","error_type":"incomplete_generation"}`,
		engineSGLang: `{"object":"error","message":"Internal server error: simulated engine failure","type":"InternalServerError","param":null,"code":500}`,
		engineTRTLLM: `{"object":"error","message":"simulated engine failure","type":"InternalServerError","param":null,"code":500}`,
	}
	errorEvent := map[string]string{ // the events after the third token
		engineVLLM:   `data: {"error":{"message":"simulated engine failure mid-stream","type":"InternalServerError","param":null,"code":500}}` + "\n\ndata: [DONE]\n\n",
		engineTGI:    `data: {"error":{"message":"Request failed during generation: simulated engine failure mid-stream","http_status_code":422}}` + "\n\ndata: [DONE]\n\n",
		engineSGLang: `data: {"error": {"object": "error", "message": "simulated engine failure mid-stream", "type": "INTERNAL_SERVER_ERROR", "param": null, "code": 500}}` + "\n\n",
		engineTRTLLM: "", // connection dropped
	}
	healthFail := map[string]int{engineVLLM: 500, engineTGI: 503, engineSGLang: 503, engineTRTLLM: 503}
	for _, engine := range engineNames {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ts := startEngine(t, engine, config{fault: faultHTTP500})
			if resp, got := do(t, "POST", ts.URL+"/v1/chat/completions", body); resp.StatusCode != 500 || got != http500[engine] {
				t.Errorf("http500: %d %s", resp.StatusCode, got)
			}

			ts = startEngine(t, engine, config{fault: faultErrorEvent})
			resp := post(t, ts.URL+"/v1/chat/completions", body)
			raw, err := io.ReadAll(resp.Body)
			got := string(raw)
			if resp.StatusCode != 200 || strings.Count(got, `"content":"`) != 3+map[string]int{engineVLLM: 1, engineSGLang: 1}[engine] {
				t.Errorf("error-event: %d %q", resp.StatusCode, got)
			}
			if engine == engineTRTLLM {
				if err == nil || strings.Contains(got, "[DONE]") {
					t.Errorf("error-event: body %q, err %v; want a cut-off stream", got, err)
				}
			} else if !strings.Contains(got, errorEvent[engine]) {
				t.Errorf("error-event: %q lacks %q", got, errorEvent[engine])
			}
			if engine == engineSGLang && !strings.HasSuffix(normalize(got), `"choices":[],"usage":{"prompt_tokens":1,"total_tokens":4,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null}}`+"\n\ndata: [DONE]\n\n") {
				t.Errorf("error-event: sglang should still send usage (3 tokens) and [DONE]: %q", got)
			}

			ts = startEngine(t, engine, config{fault: faultNoDone})
			_, got = do(t, "POST", ts.URL+"/v1/chat/completions", body)
			if strings.Contains(got, "[DONE]") || strings.Contains(got, `"usage":{`) || strings.Count(got, `"content":"`) < 5 {
				t.Errorf("no-done: %q", got)
			}

			ts = startEngine(t, engine, config{fault: faultStall})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if sresp, err := http.DefaultClient.Do(req); err == nil {
				raw, _ := io.ReadAll(sresp.Body)
				sresp.Body.Close()
				if n := strings.Count(string(raw), `"content":"`); n < 1 || n > 2 || strings.Contains(string(raw), "[DONE]") {
					t.Errorf("stall: %q", raw)
				}
			} else {
				t.Errorf("stall: %v", err)
			}

			ts = startEngine(t, engine, config{fault: faultHealthFail})
			if resp, _ := do(t, "GET", ts.URL+"/health", ""); resp.StatusCode != healthFail[engine] {
				t.Errorf("health-fail: /health %d, want %d", resp.StatusCode, healthFail[engine])
			}
		})
	}
}

// TestEngineMetrics checks each engine's metric names after one streaming
// request.
func TestEngineMetrics(t *testing.T) {
	for engine, want := range map[string][]string{
		engineVLLM: {
			`vllm:num_requests_running{model_name="m",engine="0"} 0`, `vllm:num_requests_waiting{`,
			`vllm:prompt_tokens_total{model_name="m",engine="0"} 4`, `vllm:generation_tokens_total{model_name="m",engine="0"} 3`,
			`vllm:request_success_total{finished_reason="length",model_name="m",engine="0"} 1`,
			`vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 1`,
			`vllm:inter_token_latency_seconds_count{model_name="m",engine="0"} 2`,
			`vllm:e2e_request_latency_seconds_count{model_name="m",engine="0"} 1`,
			`vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0`,
			`http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 1`,
		},
		engineTGI: {
			"# TYPE tgi_request_count counter\ntgi_request_count 1\n\n",
			"tgi_request_success 1\n", "tgi_queue_size 0\n", "tgi_batch_current_size 0\n",
			"tgi_request_input_length_sum 4\n", "tgi_request_generated_tokens_sum 3\n",
			"tgi_request_queue_duration_count 1\n", "tgi_request_duration_count 1\n",
			"tgi_request_duration_bucket{le=\"+Inf\"} 1\n",
		},
		engineSGLang: {
			"# HELP sglang:num_running_reqs Multiprocess metric\n# TYPE sglang:num_running_reqs gauge\n",
			`sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0`,
			`sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0`,
			`sglang:prompt_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 4.0`,
			`sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 3.0`,
			`sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="m"} 1.0`,
			`sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="400.0",model_name="m"} 1.0`,
			`sglang:time_to_first_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 1.0`,
			`sglang:e2e_request_latency_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 1.0`,
			`sglang:inter_token_latency_seconds_count{engine_type="unified",model_name="m"} 2.0`,
			`sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0`,
			`sglang:http_responses_total{endpoint="/v1/chat/completions",method="POST",status_code="200"} 1.0`,
		},
		engineTRTLLM: {
			`request_success_total{engine_type="undefined",finished_reason="length",model_name="undefined"} 1.0`,
			`time_to_first_token_seconds_bucket{engine_type="undefined",le="2560.0",model_name="undefined"} 1.0`,
			`e2e_request_latency_seconds_count{engine_type="undefined",model_name="undefined"} 1.0`,
			`time_per_output_token_seconds_count{engine_type="undefined",model_name="undefined"} 1.0`,
			`request_queue_time_seconds_count{engine_type="undefined",model_name="undefined"} 1.0`,
		},
	} {
		t.Run(engine, func(t *testing.T) {
			ts := startEngine(t, engine, config{})
			path := map[string]string{engineTRTLLM: "/prometheus/metrics"}[engine]
			if path == "" {
				path = "/metrics"
			}
			_, before := do(t, "GET", ts.URL+path, "")
			if engine == engineTGI && before != "" {
				t.Errorf("tgi metrics before any request: %q, want none (series appear once recorded)", before)
			}
			do(t, "POST", ts.URL+"/v1/chat/completions", chatBody)
			// The last counters move just after the stream's final write.
			var missing []string
			var got string
			for try := 0; try < 40; try++ {
				_, got = do(t, "GET", ts.URL+path, "")
				missing = missing[:0]
				for _, w := range want {
					if !strings.Contains(got, w) {
						missing = append(missing, w)
					}
				}
				if len(missing) == 0 {
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
			if len(missing) > 0 {
				t.Errorf("metrics lack %q:\n%s", missing, got)
			}
			if engine == engineTRTLLM {
				// /metrics is JSON iteration stats, not Prometheus.
				_, stats := do(t, "GET", ts.URL+"/metrics", "")
				if !strings.HasPrefix(stats, `[{"iter":`) || !strings.Contains(stats, `"numCompletedRequests":1`) {
					t.Errorf("trtllm /metrics: %s", stats)
				}
				if _, stats = do(t, "GET", ts.URL+"/metrics", ""); stats != "[]" {
					t.Errorf("trtllm /metrics when idle: %s, want []", stats)
				}
			}
		})
	}
}

// TestEngineNonStreaming checks the non-streaming bodies' shape and length.
func TestEngineNonStreaming(t *testing.T) {
	const body = `{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":3}`
	for engine, want := range map[string]string{
		engineTGI:    `{"object":"chat.completion","id":"","created":C,"model":"m","system_fingerprint":"` + tgiFingerprint + `","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}`,
		engineSGLang: `{"id":"ID","object":"chat.completion","created":C,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown","reasoning_content":null},"logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0,"completion_tokens_details":null},"metadata":null}`,
		engineTRTLLM: `{"id":"ID","object":"chat.completion","created":C,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown","reasoning_content":null,"reasoning":null,"tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null,"mm_embedding_handle":null,"disaggregated_params":null,"avg_decoded_tokens_per_iter":null}],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}},"prompt_token_ids":null,"prompt_token_ids_b64":null}`,
	} {
		ts := startEngine(t, engine, config{})
		resp, got := do(t, "POST", ts.URL+"/v1/chat/completions", body)
		if engine != engineTGI {
			got = normalize(got)
		} else {
			got = createdRE.ReplaceAllString(got, `"created":C`)
		}
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: %d\n got %s\nwant %s", engine, resp.StatusCode, got, want)
		}
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{0: "0.0", 3: "3.0", 0.1: "0.1", 1e-05: "1e-05", 0.25: "0.25", 400: "400.0"} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
	for f, want := range map[float64]string{1234567: "1.234567e+06", 2560: "2560.0", math.Inf(1): "+Inf"} {
		if got := promFloat(f); got != want {
			t.Errorf("promFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// TestAPIKey checks vLLM's AuthenticationMiddleware rules: /v1/* needs the
// Bearer key (scheme in any case), /health and /metrics never do.
func TestAPIKey(t *testing.T) {
	ts := startSim(t, config{apiKey: "sk-right", ttft: time.Millisecond, itl: time.Millisecond})
	do := func(method, path, auth string) *http.Response {
		t.Helper()
		body := `{"model":"m","prompt":"hi","max_tokens":2}`
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/v1/models", "", http.StatusUnauthorized},
		{"GET", "/v1/models", "Bearer sk-wrong", http.StatusUnauthorized},
		{"GET", "/v1/models", "Basic sk-right", http.StatusUnauthorized},
		{"GET", "/v1/models", "Bearer sk-right", http.StatusOK},
		{"GET", "/v1/models", "bearer sk-right", http.StatusOK},
		{"POST", "/v1/completions", "", http.StatusUnauthorized},
		{"POST", "/v1/completions", "Bearer sk-right", http.StatusOK},
		{"GET", "/health", "", http.StatusOK},
		{"GET", "/metrics", "", http.StatusOK},
	} {
		resp := do(tc.method, tc.path, tc.auth)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with %q: status %d, want %d", tc.method, tc.path, tc.auth, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusUnauthorized {
			var body map[string]string
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body["error"] != "Unauthorized" {
				t.Errorf("%s %s: body %v (%v), want vLLM's {\"error\": \"Unauthorized\"}", tc.method, tc.path, body, err)
			}
		}
	}
}

func TestAPIKeyFlag(t *testing.T) {
	t.Setenv("VLLM_API_KEY", "from-env")
	cfg, err := parseFlags([]string{"--model", "m"})
	if err != nil || cfg.apiKey != "from-env" {
		t.Fatalf("VLLM_API_KEY: got %q, %v", cfg.apiKey, err)
	}
	cfg, err = parseFlags([]string{"--model", "m", "--api-key", "from-flag"})
	if err != nil || cfg.apiKey != "from-flag" {
		t.Fatalf("--api-key over VLLM_API_KEY: got %q, %v", cfg.apiKey, err)
	}
	if _, err := parseFlags([]string{"--model", "m", "--engine", "tgi", "--api-key", "k"}); err == nil {
		t.Fatal("--api-key with --engine tgi was accepted")
	}
}

// A connection that never sends a request (a port-forward's, held open) must not hold up the exit:
// every e2e test stops its simulators, and Shutdown alone waits 5 s for such a connection.
func TestStopIsPromptWithAnIdleConnectionOpen(t *testing.T) {
	cfg := config{host: "127.0.0.1", port: freePort(t), model: "m", ttft: time.Millisecond, itl: time.Millisecond, maxNumSeqs: 4}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	addr := net.JoinHostPort(cfg.host, fmt.Sprint(cfg.port))
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if conn, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the simulator never listened: %v", err)
	}
	defer conn.Close()
	time.Sleep(50 * time.Millisecond) // the server has accepted it: StateNew
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
	if took := time.Since(stopped); took > 3*time.Second {
		t.Fatalf("stopping took %v with an idle connection open; want well under Shutdown's 5 s", took)
	}
}
