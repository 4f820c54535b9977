package alertstack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// webhookMessage is Alertmanager's webhook payload, version 4
// (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
type webhookMessage struct {
	Version  string         `json:"version"`
	Status   string         `json:"status"`
	Receiver string         `json:"receiver"`
	Alerts   []webhookAlert `json:"alerts"`
}

type webhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Fingerprint string            `json:"fingerprint"`
}

// ReceivedAlert is one alert of one notification, with when it arrived.
type ReceivedAlert struct {
	At time.Time
	webhookAlert
}

// Webhook is the receiver Alertmanager notifies.
type Webhook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts []ReceivedAlert
	errs   []string
}

func startWebhook(t *testing.T) *Webhook {
	t.Helper()
	w := &Webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var m webhookMessage
		err := json.NewDecoder(r.Body).Decode(&m)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil || m.Version != "4" {
			w.errs = append(w.errs, fmt.Sprintf("undecodable notification (version %q): %v", m.Version, err))
			http.Error(rw, "bad payload", http.StatusBadRequest)
			return
		}
		now := time.Now()
		for _, a := range m.Alerts {
			w.alerts = append(w.alerts, ReceivedAlert{At: now, webhookAlert: a})
		}
	}))
	t.Cleanup(func() {
		w.srv.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, e := range w.errs {
			t.Errorf("webhook: %s", e)
		}
	})
	return w
}

// Received returns every alert notified so far, oldest first.
func (w *Webhook) Received() []ReceivedAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.alerts)
}

// First returns the first notified alert that match accepts.
func (w *Webhook) First(match func(ReceivedAlert) bool) (ReceivedAlert, bool) {
	for _, a := range w.Received() {
		if match(a) {
			return a, true
		}
	}
	return ReceivedAlert{}, false
}

// writeAlertmanagerConfig writes dashboards/alertmanager.yml with the
// webhook as its receiver and the route's timers shortened; its grouping
// and inhibit rules are kept as shipped.
func writeAlertmanagerConfig(t *testing.T, path, hookURL string) {
	t.Helper()
	var cfg map[string]any
	data, err := os.ReadFile(Shipped(t, AlertmanagerFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", AlertmanagerFile, err)
	}
	route, ok := cfg["route"].(map[string]any)
	if !ok {
		t.Fatalf("%s has no route", AlertmanagerFile)
	}
	if _, ok := cfg["inhibit_rules"]; !ok {
		t.Fatalf("%s has no inhibit_rules; the test checks them", AlertmanagerFile)
	}
	// Sub-routes may only send to a receiver with no integration (the
	// "null" receiver of alerts that only inhibit): those are kept as
	// shipped, and everything else goes to the webhook.
	receivers := []any{map[string]any{
		"name":            "test-webhook",
		"webhook_configs": []any{map[string]any{"url": hookURL, "send_resolved": true}},
	}}
	shipped := map[string]map[string]any{}
	if rs, ok := cfg["receivers"].([]any); ok {
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				name, _ := m["name"].(string)
				shipped[name] = m
			}
		}
	}
	kept := map[string]bool{}
	subs, _ := route["routes"].([]any)
	for _, sub := range subs {
		m, _ := sub.(map[string]any)
		name, _ := m["receiver"].(string)
		if r, ok := shipped[name]; !ok || len(r) != 1 || name == route["receiver"] {
			t.Fatalf("%s: sub-route %v sends to %q, not to a receiver with no integration; the test routes everything else to one webhook and would need to learn it", AlertmanagerFile, sub, name)
		}
		if !kept[name] {
			receivers = append(receivers, shipped[name])
			kept[name] = true
		}
	}
	route["receiver"] = "test-webhook"
	route["group_wait"] = "1s"
	route["group_interval"] = "1s"
	route["repeat_interval"] = "1h"
	cfg["receivers"] = receivers
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// AMAlert is an alert as Alertmanager's API v2 shows it.
type AMAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State       string   `json:"state"`
		InhibitedBy []string `json:"inhibitedBy"`
		SilencedBy  []string `json:"silencedBy"`
	} `json:"status"`
}
