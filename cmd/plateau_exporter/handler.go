// The daemon's HTTP endpoints and the limits around them: methods, the
// headers every answer carries, the in-flight limit of the page and its
// JSON, the lifecycle gate of /-/reload and the cap on open connections.

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
)

type handlerOptions struct {
	serve    serveOptions
	registry *prometheus.Registry
	reloader *reloader
	page     *statuspage.Page
	logger   log.Logger
}

func newHandler(h handlerOptions) http.Handler {
	o := h.serve
	mux := http.NewServeMux()
	mux.Handle(o.metricsPath, readOnly(promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{
		ErrorLog:            stdlibLogger{h.logger},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: o.maxRequests,
		// Scrapes read snapshots and fast counters; nothing should take long.
		Timeout:           30 * time.Second,
		EnableOpenMetrics: true,
	})))
	mux.Handle("/-/healthy", readOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})))
	// Ready once the first load (target paths, baselines) is done; until
	// then /metrics already answers, with the daemon's own metrics.
	mux.Handle("/-/ready", readOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !h.reloader.ready.Load() {
			http.Error(w, "Not ready: loading the configuration", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})))
	mux.HandleFunc("/-/reload", func(w http.ResponseWriter, r *http.Request) {
		// As Prometheus: a reload over HTTP changes what the daemon does,
		// so it is off unless asked for; SIGHUP needs the daemon's user.
		if !o.enableLifecycle {
			http.Error(w, "Lifecycle API is not enabled (--web.enable-lifecycle); send SIGHUP to reload", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			w.Header().Set("Allow", "POST, PUT")
			http.Error(w, "reload needs POST or PUT", http.StatusMethodNotAllowed)
			return
		}
		// A browser on another site may send a "simple" POST here without
		// asking first; it always says where it comes from.
		if !sameOrigin(r) {
			http.Error(w, "cross-origin reload refused", http.StatusForbidden)
			return
		}
		err, ran := h.reloader.tryReload()
		switch {
		case !ran:
			w.Header().Set("Retry-After", "5")
			http.Error(w, "a reload is already in progress", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, fmt.Sprintf("failed to reload config: %s", boundedErr(err)), http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, "config reloaded")
		}
	})
	// The page and its JSON have the same in-flight limit as /metrics:
	// each request renders the whole state.
	limit := newInFlight(o.maxRequests)
	mux.Handle("/status.json", limit.wrap(h.page.JSON()))
	// With --web.telemetry-path=/ the metrics keep "/", as before.
	if o.metricsPath != "/" {
		mux.Handle("/", limit.wrap(h.page.HTML()))
	}
	return securityHeaders(mux)
}

// securityHeaders marks every answer: no content sniffing (a label value
// is never run as a script), and no framing by another site.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// readOnly answers GET and HEAD only.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin is true for a request without Origin (curl, scripts) or
// whose Origin names the host it was sent to.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Host == r.Host
}

// inFlight refuses requests over its limit with 503, as promhttp does
// for /metrics; 0 is no limit.
type inFlight chan struct{}

func newInFlight(n int) inFlight {
	if n <= 0 {
		return nil
	}
	return make(inFlight, n)
}

func (l inFlight) wrap(next http.Handler) http.Handler {
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

// connLimiter closes new connections over its limit at once, so that
// clients holding connections cannot take the descriptors the probes'
// worker pipes and the collectors need. The limit is the flag's, and at
// most half of the process's descriptor limit.
type connLimiter struct {
	mu     sync.Mutex
	open   int
	limit  int
	logger log.Logger
	warned time.Time
}

func newConnLimiter(logger log.Logger, flag int) *connLimiter {
	limit := flag
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<30 {
		if half := int(rl.Cur / 2); limit <= 0 || half < limit {
			limit = half
		}
	}
	level.Debug(logger).Log("msg", "connection limit", "max_connections", limit)
	return &connLimiter{limit: limit, logger: logger}
}

func (c *connLimiter) connState(conn net.Conn, state http.ConnState) {
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
