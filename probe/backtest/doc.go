// Package backtest replays recorded probe series through alerting and
// recording rules with Prometheus's PromQL engine and the rule semantics
// of a Prometheus server (package ruleeval, held against Prometheus's
// rules package by this package's test), and measures how the rules would
// have behaved: how often they page on the unmodified series, and how fast
// they page on drops injected into it. It owns `plateau_exporter
// backtest`: reading series (a CSV file here, a running Prometheus in
// package promfetch), synthesizing the metrics the daemon would have
// exported run by run, evaluating two rule sets side by side on the same
// trials, and the report (table, JSON, SVG). With --fleet, package
// groundtruth says what really happened on the series, and the report
// judges the file-system page against it.
package backtest
