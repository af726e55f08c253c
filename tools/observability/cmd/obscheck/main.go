// Command obscheck holds pulsar-proxy's Grafana dashboard and alert rules to a recording of
// the real proxy's /metrics (test/e2e TestDashboardAndAlertsMatchTheProxy runs it): every
// metric and label a query names must have been exported, and every pulsar_proxy_* metric the
// proxy exported must be on the dashboard. With -fresh, a recording of a proxy no client has
// used yet: every metric the dashboard and the rules name must be in it already, and every
// dashboard query must return a series over it (no panel says "No data" on a fresh proxy). It
// exits 1 listing every disagreement.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/pulsar-proxy/pulsar-proxy/tools/observability/promcheck"
)

func main() {
	recording := flag.String("recording", "", "scrapes of the proxy's /metrics, one JSON object a line")
	dashboard := flag.String("dashboard", "", "the Grafana dashboard (JSON)")
	rules := flag.String("rules", "", "the Prometheus rule file (YAML)")
	fresh := flag.String("fresh", "", "scrapes of a fresh proxy's /metrics, before any client (optional)")
	flag.Parse()
	if *recording == "" || *dashboard == "" || *rules == "" {
		fmt.Fprintln(os.Stderr, "usage: obscheck -recording FILE -dashboard FILE -rules FILE")
		os.Exit(2)
	}
	err := run(*recording, *dashboard, *rules)
	if err == nil && *fresh != "" {
		err = runFresh(*fresh, *dashboard, *rules)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "obscheck:", err)
		os.Exit(1)
	}
}

func run(recording, dashboard, rules string) error {
	scrapes, err := promcheck.ReadRecording(recording)
	if err != nil {
		return err
	}
	exported, err := promcheck.ExportedBy(scrapes)
	if err != nil {
		return err
	}
	dq, err := promcheck.DashboardQueries(dashboard)
	if err != nil {
		return err
	}
	rq, err := promcheck.RuleQueries(rules)
	if err != nil {
		return err
	}
	problems := promcheck.Check(append(dq, rq...), exported)
	unused := promcheck.Unused(dq, exported, "pulsar_proxy_")
	for _, p := range problems {
		fmt.Println("problem:", p)
	}
	for _, name := range unused {
		fmt.Println("problem: the proxy exports", name, "but no dashboard panel shows it")
	}
	fmt.Printf("obscheck: %d scrapes, %d metrics exported; %d dashboard queries and %d rule expressions checked; %d problem(s)\n",
		len(scrapes), len(exported), len(dq), len(rq), len(problems)+len(unused))
	if len(problems)+len(unused) > 0 {
		return fmt.Errorf("the dashboard or the rules disagree with the proxy's /metrics")
	}
	return nil
}

// runFresh holds the dashboard and the rules to a fresh proxy's recording: every metric and
// label they name already exported, every dashboard query with a series.
func runFresh(recording, dashboard, rules string) error {
	scrapes, err := promcheck.ReadRecording(recording)
	if err != nil {
		return err
	}
	exported, err := promcheck.ExportedBy(scrapes)
	if err != nil {
		return err
	}
	dq, err := promcheck.DashboardQueries(dashboard)
	if err != nil {
		return err
	}
	rq, err := promcheck.RuleQueries(rules)
	if err != nil {
		return err
	}
	problems := promcheck.Check(append(dq, rq...), exported)
	empty, err := promcheck.NoData(dq, scrapes)
	if err != nil {
		return err
	}
	for _, p := range append(problems, empty...) {
		fmt.Println("problem on a fresh proxy:", p)
	}
	fmt.Printf("obscheck -fresh: %d scrapes, %d metrics exported before any client; %d dashboard queries evaluated; %d problem(s)\n",
		len(scrapes), len(exported), len(dq), len(problems)+len(empty))
	if len(problems)+len(empty) > 0 {
		return fmt.Errorf("on a fresh proxy the dashboard or the rules name what is not exported yet, or panels have no data")
	}
	return nil
}
