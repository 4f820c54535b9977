// Package ruleeval evaluates Prometheus rule files over samples held in
// memory as a Prometheus server's rule manager does (rules.go, held
// against Prometheus's own rules package by the backtest's tests), and
// counts the notifications an Alertmanager configuration's grouping and
// inhibitions make of the firing alerts (alertmanager.go). It knows
// nothing of probes: the backtest writes the series a daemon would have
// exported into a Store and reads what the rules did.
package ruleeval
