package webguard

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// The page and /status.json render the whole state per request: past the
// in-flight limit they answer 503 at once, as /metrics does, instead of
// rendering a hundred copies (1.6 GB for 100 parallel GET / of a 7.5 MB
// page).
func TestHostileInFlightLimit(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 3)
	h := NewInFlight(2).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	var done sync.WaitGroup
	for i := 0; i < 2; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}()
	}
	<-entered
	<-entered
	for i := 0; i < 100; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("request %d over the limit: HTTP %d, want 503", i, rec.Code)
		}
	}
	close(release)
	done.Wait()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("after the limit freed: HTTP %d", rec.Code)
	}
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, host string
		want         bool
	}{
		{"", "node1:9731", true},
		{"http://node1:9731", "node1:9731", true},
		{"http://evil.example", "node1:9731", false},
		{"null", "node1:9731", false},
		{"http://node1:9731.evil.example", "node1:9731", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://"+c.host+"/-/reload", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := SameOrigin(r); got != c.want {
			t.Errorf("Origin %q to %s: %v, want %v", c.origin, c.host, got, c.want)
		}
	}
}
