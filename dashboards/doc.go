// Package dashboards owns what plateau_exporter ships for Prometheus,
// Alertmanager and Grafana: the recording rules (rules.yml), the alerting
// rules, per node (alerts.yml) and of the fleet (fleet_alerts.yml), with
// their runbook (RUNBOOK.md), the federation job of a global Prometheus
// above racks (federate.yml), an example Alertmanager configuration
// (alertmanager.yml), the Grafana dashboards (*.json) and the promtool unit
// tests of the rules (tests/*.yml).
//
// The package holds no code the exporter runs. Its tests run promtool and
// amtool on those files, and check with the PromQL parser that every
// expression of the rules and dashboards parses and names only metrics that
// the exporter exports, against the golden /metrics output of the daemon, so
// the rules and dashboards cannot drift from the code.
package dashboards
