package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// natsCLIVersion is the natscli release the docs are tested with.
const natsCLIVersion = "v0.5.0"

// natsCLI returns the nats binary: $AX_NATS_CLI, or the one .ci/run caches
// in $(go env GOPATH)/ax-tools, installed with go install if missing.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AX_NATS_CLI"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	require.NoError(t, err)
	gopath := strings.Split(strings.TrimSpace(string(out)), string(os.PathListSeparator))[0]
	dir := filepath.Join(gopath, "ax-tools", "natscli-"+natsCLIVersion)
	bin := filepath.Join(dir, "nats")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
	install.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
	msg, err := install.CombinedOutput()
	require.NoError(t, err, "go install natscli:\n%s", msg)
	return bin
}

// Every nats command of docs/OPERATIONS.md, run as written against a live
// ax dev, shows what the doc says it shows.
func TestOperationsDocWithNatsCLI(t *testing.T) {
	nats := natsCLI(t)
	dev := startDev(t)
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	home := t.TempDir() // no nats contexts of the machine's user
	// command builds a documented command line, failing through t if the
	// doc does not have it as written.
	command := func(t tb, line string) (*exec.Cmd, context.CancelFunc) {
		t.Helper()
		require.Contains(t, string(doc), "\n"+line+"\n", "the command is documented as written")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Env = append(os.Environ(), "NATS_URL="+dev.url, "HOME="+home,
			"PATH="+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"))
		return cmd, cancel
	}
	// runBy runs a documented command line, failing through t: the test,
	// or the collector of an EventuallyWithT condition.
	runBy := func(t tb, line string) string {
		t.Helper()
		cmd, cancel := command(t, line)
		defer cancel()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", line, out)
		return string(out)
	}
	run := func(line string) string {
		t.Helper()
		return runBy(t, line)
	}
	runFailing := func(line string) string {
		t.Helper()
		cmd, cancel := command(t, line)
		defer cancel()
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s:\n%s", line, out)
		return string(out)
	}

	require.Contains(t, run(`nats pub -J ax.submit.p2.acme.sleep.order-42 '{"ms":10}' -H Nats-Msg-Id:order-42`), "Stored in Stream: AX_P2")
	require.Contains(t, run(`nats pub -J ax.submit.p2.acme.fail.report-7 '' -H Nats-Msg-Id:report-7`), "Stored in Stream: AX_P2")

	// Mistyped subjects: once the leader watches, a plain publish is seen
	// and a JetStream publish is answered with the mistake.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runAx(c, "stats", "--server", dev.url), "rejected submits (leader")
	}, 30*time.Second, 200*time.Millisecond)
	require.Contains(t, run(`nats pub ax.submit.p9.acme.sleep.k9 'lost'`), "Published")
	refused := runFailing(`nats pub -J ax.submit.P2.acme.sleep.k9 'refused'`)
	require.Contains(t, refused, `nats: error: ax: no priority bucket accepts subject "ax.submit.P2.acme.sleep.k9": priority token "P2" is not p0..p4; the message was not stored`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "stats", "--server", dev.url)
		assert.Contains(c, out, "rejected submits (leader")
		assert.Contains(c, out, ": 2 (priority 2)")
		assert.Contains(c, out, "ax.submit.p9.acme.sleep.k9: priority token \"p9\" is not p0..p4")
	}, 30*time.Second, 200*time.Millisecond)
	require.Contains(t, string(doc), "\nax rejects --for 5s\n")
	sample := runAx(t, "rejects", "--for", "1s", "--server", dev.url)
	require.Contains(t, sample, "rejected submits (leader")
	require.Contains(t, sample, "sampled 1s on ax.submit ax.submit.> ax.core ax.core.>")

	ls := run("nats stream ls")
	for _, s := range []string{"AX_P0", "AX_P1", "AX_P2", "AX_P3", "AX_P4", "AX_DLQ", "AX_TRAIL"} {
		require.Contains(t, ls, s)
	}
	info := run("nats stream info AX_P2")
	require.Contains(t, info, "ax.submit.p2.*.*.*")
	require.Contains(t, info, "ax.core.p2.*.*.*")
	require.Contains(t, info, "{{partition(32,4)}}")
	require.Contains(t, info, "WorkQueue")
	consumers := run("nats consumer ls AX_P2")
	require.Contains(t, consumers, "p2-s00")
	require.Contains(t, consumers, "p2-s31")
	require.Contains(t, run("nats consumer info AX_P2 p2-s07"), "ax.p2.7.>")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runBy(c, "nats kv get AX_TASKS acme.order-42 --raw"), `"state":"SUCCEEDED"`)
	}, 30*time.Second, 100*time.Millisecond)
	record := run("nats kv get AX_TASKS acme.order-42 --raw")
	require.Contains(t, record, `"action":"claim"`)
	require.Contains(t, record, `"action":"complete"`)
	require.Contains(t, run("nats kv history AX_TASKS acme.order-42"), "order-42")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, runBy(c, "nats stream subjects AX_DLQ"), "ax.dlq.acme.fail")
	}, 30*time.Second, 100*time.Millisecond)
	letter := run("nats stream get AX_DLQ 1")
	require.Contains(t, letter, "Ax-Task-Id: report-7")
	require.Contains(t, letter, "Ax-Error: permanent: fail: task report-7 fails by design")
	require.Contains(t, letter, "Ax-Subject: ax.submit.p2.acme.fail.report-7")

	require.Regexp(t, `│ ax\s+│ 0\.1\.0`, run("nats micro ls"))
	micro := run("nats micro info ax")
	for _, verb := range []string{"task.get", "task.cancel", "tasks.cancel", "dlq.replay", "stats", "workers"} {
		require.Contains(t, micro, "ax.admin."+verb)
	}
	require.Contains(t, run(`nats req ax.admin.task.trail '{"id":"order-42","tenant":"acme"}'`), `"to":"SUCCEEDED"`)
	require.Contains(t, run(`nats req ax.admin.dlq.replay '{"id":"report-7","tenant":"acme"}'`), `"replayed":[{"tenant":"acme","id":"report-7"}]`)
	notFound := run(`nats req ax.admin.task.get '{"id":"no-such-task"}'`)
	require.Contains(t, notFound, "Nats-Service-Error-Code: 404")
	require.Contains(t, notFound, "unknown task")
	require.Regexp(t, `task_get\s+│ 1\s+│ q\s+│ 1 `, run("nats micro stats ax"))
}
