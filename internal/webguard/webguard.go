// Package webguard holds the limits and headers every HTTP answer of the
// daemon goes through: read-only methods, no sniffing or framing, a
// same-origin check for state-changing requests, an in-flight limit and a
// cap on open connections. It knows nothing of the endpoints it guards.
package webguard

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sys/unix"
)

// SecurityHeaders marks every answer: no content sniffing (a label value
// is never run as a script), and no framing by another site.
func SecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// ReadOnly answers GET and HEAD only.
func ReadOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SameOrigin is true for a request without Origin (curl, scripts) or
// whose Origin names the host it was sent to.
func SameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Host == r.Host
}

// InFlight refuses requests over its limit with 503, as promhttp does
// for /metrics; 0 is no limit.
type InFlight chan struct{}

// NewInFlight allows n requests at once; 0 or less is no limit.
func NewInFlight(n int) InFlight {
	if n <= 0 {
		return nil
	}
	return make(InFlight, n)
}

// Wrap serves next within the limit.
func (l InFlight) Wrap(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l <- struct{}{}:
			defer func() { <-l }()
			next.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("limit of %d concurrent requests reached", cap(l)), http.StatusServiceUnavailable)
		}
	})
}

// ConnLimiter closes new connections over its limit at once, so that
// clients holding connections cannot take the descriptors the probes'
// worker pipes and the collectors need. The limit is the flag's, and at
// most half of the process's descriptor limit.
type ConnLimiter struct {
	mu     sync.Mutex
	open   int
	limit  int
	logger log.Logger
	warned time.Time
}

// NewConnLimiter caps open connections at flag, and at most half the
// descriptor limit.
func NewConnLimiter(logger log.Logger, flag int) *ConnLimiter {
	limit := flag
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<30 {
		if half := int(rl.Cur / 2); limit <= 0 || half < limit {
			limit = half
		}
	}
	level.Debug(logger).Log("msg", "connection limit", "max_connections", limit)
	return &ConnLimiter{limit: limit, logger: logger}
}

// ConnState is the http.Server hook that counts and refuses connections.
func (c *ConnLimiter) ConnState(conn net.Conn, state http.ConnState) {
	if c.limit <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		if c.open >= c.limit {
			_ = conn.Close()
			if time.Since(c.warned) > time.Minute {
				c.warned = time.Now()
				level.Warn(c.logger).Log("msg", "connection refused: too many open connections", "max_connections", c.limit)
			}
			// The server still reports StateClosed for it.
		}
		c.open++
	case http.StateHijacked, http.StateClosed:
		c.open--
	}
}
