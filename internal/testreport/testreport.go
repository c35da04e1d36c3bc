// Package testreport reads the events of `go test -json` and prints what
// `go test` prints without -json (each failed test's output, a line per
// package), then the slowest tests, each package's time and the total.
// .ci/run pipes the test suite through it (.ci/testreport.go); its exit
// code fails CI when a test or a package failed, a package did not build,
// or no package reported at all, whatever go test's own exit code.
package testreport

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, with the
// build events of Go 1.24).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64 // seconds
	Output     string
}

// result is a finished test or package.
type result struct {
	Package, Test string
	Action        string // pass, fail or skip
	Elapsed       time.Duration
}

// report is the state of one run.
type report struct {
	w        io.Writer
	output   map[[2]string][]string // running tests' output, by package and test
	started  map[string]bool        // packages without a result yet
	tests    []result               // top-level tests that passed or failed
	skipped  int                    // top-level tests skipped
	packages []result
	failed   bool
	first    time.Time
	last     time.Time
}

// Run reads `go test -json` events from r and writes the report to w,
// listing the slowest tests. A line that is not an event (go test's own
// errors on stderr, when merged) is written as is. It returns the exit
// code: 1 when anything failed or no package reported, else 0.
func Run(r io.Reader, w io.Writer, slowest int) int {
	rep := &report{w: w, output: map[[2]string][]string{}, started: map[string]bool{}}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		rep.add(e)
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(w, "testreport: read the events: %v\n", err)
		rep.failed = true
	}
	rep.finish(slowest)
	if rep.failed || len(rep.packages) == 0 {
		return 1
	}
	return 0
}

func (r *report) add(e event) {
	if !e.Time.IsZero() {
		if r.first.IsZero() {
			r.first = e.Time
		}
		r.last = e.Time
	}
	key := [2]string{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "build-fail":
		r.failed = true
	case "start":
		r.started[e.Package] = true
	case "output":
		switch {
		case e.Test != "":
			r.output[key] = append(r.output[key], e.Output)
		case e.Output != "PASS\n":
			fmt.Fprint(r.w, e.Output) // ok/FAIL lines, and what TestMain prints
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.endPackage(e)
			return
		}
		if e.Action == "fail" {
			r.failed = true
			r.print(r.output[key])
		}
		switch {
		case strings.Contains(e.Test, "/"): // a subtest: its parent is counted
		case e.Action == "skip":
			r.skipped++
		default:
			r.tests = append(r.tests, result{Package: e.Package, Test: e.Test, Action: e.Action, Elapsed: seconds(e.Elapsed)})
		}
		delete(r.output, key)
	}
}

// endPackage records a package's result; a failed package's tests that
// never ended (a panic, the timeout) have their output printed.
func (r *report) endPackage(e event) {
	delete(r.started, e.Package)
	r.packages = append(r.packages, result{Package: e.Package, Action: e.Action, Elapsed: seconds(e.Elapsed)})
	if e.Action == "fail" {
		r.failed = true
	}
	r.flush(e.Package)
}

// flush prints and forgets the output of the tests of pkg still running.
func (r *report) flush(pkg string) {
	keys := make([][2]string, 0)
	for key := range r.output {
		if key[0] == pkg {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[1], b[1]) })
	for _, key := range keys {
		fmt.Fprintf(r.w, "--- %s %s did not end:\n", key[0], key[1])
		r.print(r.output[key])
		delete(r.output, key)
	}
}

// print writes a test's output without the "=== RUN/PAUSE/CONT/NAME" lines
// that go test prints only with -v.
func (r *report) print(lines []string) {
	for _, l := range lines {
		if !strings.HasPrefix(l, "=== ") {
			fmt.Fprint(r.w, l)
		}
	}
}

func (r *report) finish(slowest int) {
	for pkg := range r.started { // go test ended without their result
		r.failed = true
		fmt.Fprintf(r.w, "FAIL\t%s\t(no result: go test ended first)\n", pkg)
		r.flush(pkg)
	}
	failedTests := 0
	for _, t := range r.tests {
		if t.Action == "fail" {
			failedTests++
		}
	}
	byTime := func(a, b result) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), strings.Compare(a.Package, b.Package), strings.Compare(a.Test, b.Test))
	}
	tests := slices.Clone(r.tests)
	slices.SortFunc(tests, byTime)
	fmt.Fprintf(r.w, "--- the %d slowest tests\n", min(slowest, len(tests)))
	for _, t := range tests[:min(slowest, len(tests))] {
		fmt.Fprintf(r.w, "%9s  %-4s  %s %s\n", round(t.Elapsed), t.Action, t.Test, t.Package)
	}
	packages := slices.Clone(r.packages)
	slices.SortFunc(packages, byTime)
	var sum time.Duration
	failedPackages := 0
	fmt.Fprintln(r.w, "--- packages, slowest first")
	for _, p := range packages {
		sum += p.Elapsed
		if p.Action == "fail" {
			failedPackages++
		}
		fmt.Fprintf(r.w, "%9s  %-4s  %s\n", round(p.Elapsed), p.Action, p.Package)
	}
	fmt.Fprintf(r.w, "--- total: %d packages (%d failed), %d top-level tests (%d failed, %d skipped); %s wall, %s of package time\n",
		len(r.packages), failedPackages, len(r.tests)+r.skipped, failedTests, r.skipped, round(r.last.Sub(r.first)), round(sum))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func round(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
