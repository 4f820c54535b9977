// The daemon's HTTP endpoints: which guard of internal/webguard each goes
// through, and the lifecycle gate of /-/reload.

package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/internal/webguard"
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
	mux.Handle(o.metricsPath, webguard.ReadOnly(promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{
		ErrorLog:            stdlibLogger{h.logger},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: o.maxRequests,
		// Scrapes read snapshots and fast counters; nothing should take long.
		Timeout:           30 * time.Second,
		EnableOpenMetrics: true,
	})))
	mux.Handle("/-/healthy", webguard.ReadOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})))
	// Ready once the first load (target paths, baselines) is done; until
	// then /metrics already answers, with the daemon's own metrics.
	mux.Handle("/-/ready", webguard.ReadOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
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
		if !webguard.SameOrigin(r) {
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
	limit := webguard.NewInFlight(o.maxRequests)
	mux.Handle("/status.json", limit.Wrap(h.page.JSON()))
	// With --web.telemetry-path=/ the metrics keep "/", as before.
	if o.metricsPath != "/" {
		mux.Handle("/", limit.Wrap(h.page.HTML()))
	}
	return webguard.SecurityHeaders(mux)
}
