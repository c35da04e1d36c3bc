package testreport

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// events builds `go test -json` lines: action, package, test, elapsed,
// output, at one second apart.
func events(rows ...[5]string) string {
	var b strings.Builder
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range rows {
		at = at.Add(time.Second)
		line := `{"Time":"` + at.Format(time.RFC3339Nano) + `","Action":"` + r[0] + `","Package":"` + r[1] + `"`
		if r[2] != "" {
			line += `,"Test":"` + r[2] + `"`
		}
		if r[3] != "" {
			line += `,"Elapsed":` + r[3]
		}
		if r[4] != "" {
			line += `,"Output":` + quote(r[4])
		}
		b.WriteString(line + "}\n")
	}
	return b.String()
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(s) + `"`
}

func TestReport(t *testing.T) {
	t.Parallel()
	passing := events(
		[5]string{"start", "ax/a", "", "", ""},
		[5]string{"run", "ax/a", "TestFast", "", ""},
		[5]string{"output", "ax/a", "TestFast", "", "=== RUN   TestFast\n"},
		[5]string{"output", "ax/a", "TestFast", "", "    a_test.go:9: a log line of a passing test\n"},
		[5]string{"output", "ax/a", "TestFast", "", "--- PASS: TestFast (0.50s)\n"},
		[5]string{"pass", "ax/a", "TestFast", "0.5", ""},
		[5]string{"pass", "ax/a", "TestSlow/case", "12", ""},
		[5]string{"pass", "ax/a", "TestSlow", "12.34", ""},
		[5]string{"skip", "ax/a", "TestBrowser", "0", ""},
		[5]string{"output", "ax/a", "", "", "PASS\n"},
		[5]string{"output", "ax/a", "", "", "ok  \tax/a\t13.1s\n"},
		[5]string{"pass", "ax/a", "", "13.1", ""},
	)
	failing := events(
		[5]string{"start", "ax/b", "", "", ""},
		[5]string{"output", "ax/b", "TestBroken", "", "=== RUN   TestBroken\n"},
		[5]string{"output", "ax/b", "TestBroken", "", "    b_test.go:7: want 1, have 2\n"},
		[5]string{"output", "ax/b", "TestBroken", "", "--- FAIL: TestBroken (2.00s)\n"},
		[5]string{"fail", "ax/b", "TestBroken", "2", ""},
		[5]string{"output", "ax/b", "", "", "FAIL\n"},
		[5]string{"output", "ax/b", "", "", "FAIL\tax/b\t2.2s\n"},
		[5]string{"fail", "ax/b", "", "2.2", ""},
	)
	panicking := events(
		[5]string{"start", "ax/c", "", "", ""},
		[5]string{"output", "ax/c", "TestHangs", "", "=== RUN   TestHangs\n"},
		[5]string{"output", "ax/c", "TestHangs", "", "panic: test timed out after 20m0s\n"},
		[5]string{"output", "ax/c", "", "", "FAIL\tax/c\t1200.0s\n"},
		[5]string{"fail", "ax/c", "", "1200", ""},
	)
	cut := events(
		[5]string{"start", "ax/d", "", "", ""},
		[5]string{"output", "ax/d", "TestRunning", "", "    d_test.go:3: still running\n"},
	)
	cases := []struct {
		name     string
		in       string
		code     int
		contains []string
		absent   []string
	}{
		{"all pass", passing, 0,
			[]string{"ok  \tax/a\t13.1s\n", "--- the 2 slowest tests\n", "   12.34s  pass  TestSlow ax/a\n    500ms  pass  TestFast ax/a\n",
				"    13.1s  pass  ax/a\n", "1 packages (0 failed), 3 top-level tests (0 failed, 1 skipped); 11s wall, 13.1s of package time"},
			[]string{"a log line of a passing test", "=== RUN", "PASS\n", "TestSlow/case"}},
		{"a test fails", passing + failing, 1,
			[]string{"    b_test.go:7: want 1, have 2\n--- FAIL: TestBroken (2.00s)\n", "FAIL\tax/b\t2.2s\n", "2s  fail  TestBroken ax/b", "2 packages (1 failed)", "(1 failed, 1 skipped)"},
			[]string{"=== RUN"}},
		{"a package panics", panicking, 1,
			[]string{"--- ax/c TestHangs did not end:\npanic: test timed out after 20m0s\n", "20m0s  fail  ax/c"}, nil},
		{"go test ended first", cut, 1,
			[]string{"FAIL\tax/d\t(no result: go test ended first)\n", "still running"}, nil},
		{"raw lines pass through", "go: downloading example.com/x v1.0.0\n" + passing, 0,
			[]string{"go: downloading example.com/x v1.0.0\n"}, nil},
		{"a build fails", `{"ImportPath":"ax/e","Action":"build-output","Output":"e.go:3:1: syntax error\n"}` + "\n" +
			`{"ImportPath":"ax/e","Action":"build-fail"}` + "\n" + passing, 1,
			[]string{"e.go:3:1: syntax error\n"}, nil},
		{"nothing ran", "", 1, []string{"0 packages"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.Equal(t, c.code, Run(strings.NewReader(c.in), &out, 15), out.String())
			for _, s := range c.contains {
				require.Contains(t, out.String(), s)
			}
			for _, s := range c.absent {
				require.NotContains(t, out.String(), s)
			}
		})
	}
}

// The events of a real `go test -json` run of a module with a passing, a
// failing and a panicking package: the failures fail the report, which
// names them and shows their output.
func TestReportOfARealRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":            "module example.com/m\n\ngo 1.24\n",
		"ok/ok_test.go":     "package ok\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) { t.Log(\"quiet\") }\n",
		"bad/bad_test.go":   "package bad\n\nimport \"testing\"\n\nfunc TestBad(t *testing.T) { t.Error(\"loud failure\") }\n",
		"boom/boom_test.go": "package boom\n\nimport \"testing\"\n\nfunc TestBoom(t *testing.T) { panic(\"boom\") }\n",
	}
	for name, text := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	events, err := cmd.Output()
	require.Error(t, err, "go test fails")
	var out bytes.Buffer
	require.Equal(t, 1, Run(bytes.NewReader(events), &out, 15), out.String())
	report := out.String()
	require.Contains(t, report, "loud failure")
	require.Contains(t, report, "--- FAIL: TestBad")
	require.Contains(t, report, "panic: boom")
	require.Contains(t, report, "ok  \texample.com/m/ok")
	require.NotContains(t, report, "quiet", "a passing test's log is not shown")
	require.Contains(t, report, "3 packages (2 failed)")
}
