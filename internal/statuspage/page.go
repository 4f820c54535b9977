package statuspage

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/store"
)

//go:embed page.html
var pageTemplate string

// Link is a link in the page's navigation bar, as exporter-toolkit's
// landing page lists them.
type Link struct {
	Address, Text string
}

// Options configure the page.
type Options struct {
	// Name and Description head the page.
	Name, Description string
	// Links are the endpoints the landing page linked to (/metrics,
	// /-/healthy, ...).
	Links []Link
	// Gather returns the input of one request. It is called for every
	// request and must not wait for a probe: take a store Snapshot.
	Gather func() Input
}

// Page serves the status page and /status.json.
type Page struct {
	o    Options
	tmpl *template.Template
}

// New parses the page's template.
func New(o Options) (*Page, error) {
	t, err := template.New("status").Funcs(template.FuncMap{
		"chart":   chartOf,
		"rate":    formatRatePtr,
		"ratio":   formatRatio,
		"when":    formatWhen,
		"seconds": formatSeconds,
		"vclass":  verdictClass,
		"timeptr": func(t time.Time) *time.Time { return timePtr(t) },
		"nonzero": nonzero,
		"runs":    runsInOrder,
		"join":    strings.Join,
	}).Parse(pageTemplate)
	if err != nil {
		return nil, err
	}
	return &Page{o: o, tmpl: t}, nil
}

// pageData is what the "page" template renders.
type pageData struct {
	Name, Description string
	Links             []Link
	S                 Status
	Now               time.Time
}

// Render writes the HTML page of a status.
func (p *Page) Render(w io.Writer, s Status) error {
	return p.tmpl.ExecuteTemplate(w, "page", pageData{Name: p.o.Name, Description: p.o.Description, Links: p.o.Links, S: s, Now: s.GeneratedAt})
}

// HTML serves the page at "/", and 404 at every other path the mux sends
// to "/", as exporter-toolkit's landing page does.
func (p *Page) HTML() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if !readOnly(w, r) {
			return
		}
		// Rendered into a buffer first, so that a template error is a
		// 500, not half a page that looks complete.
		var b bytes.Buffer
		if err := p.Render(&b, Build(p.o.Gather())); err != nil {
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b.Bytes())
	})
}

// JSON serves /status.json.
func (p *Page) JSON() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		b, err := json.MarshalIndent(Build(p.o.Gather()), "", "  ")
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	})
}

// readOnly answers methods other than GET and HEAD with 405.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "the status page is read-only", http.StatusMethodNotAllowed)
	return false
}

// nonzero keeps the counters above zero, for a line that lists only
// what happened.
func nonzero(m map[string]uint64) map[string]uint64 {
	var out map[string]uint64
	for k, v := range m {
		if v > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[k] = v
		}
	}
	return out
}

type count struct {
	Name  string
	Count uint64
}

// runsInOrder lists the runs by result as the metric names them, the
// successes first, rather than in the alphabetical order of a map.
func runsInOrder(m map[string]uint64) []count {
	out := []count{}
	for _, r := range []string{store.ResultSuccess, store.ResultFailure, store.ResultTimeout, store.ResultSkipped} {
		out = append(out, count{r, m[r]})
	}
	return out
}
