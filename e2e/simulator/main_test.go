package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
