package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/cli"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// axRun runs `ax args...` with env (nil: this process's) to its end and
// returns its stdout, stderr and exit code.
func axRun(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, axBinary, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err, "ax %s", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// commandPaths lists the path of every command of the ax tree ("tasks
// cancel"), the root first.
func commandPaths() [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(cli.NewRoot(io.Discard, io.Discard), nil)
	return out
}

// No help prints a secret of the environment: with a password, a token in
// the server URL, a token as the user and a dashboard token exported, the
// help of every command shows where a default comes from ($NATS_PASSWORD),
// never its value. Before the fix every command's help printed them as
// flag defaults.
func TestHelpPrintsNoSecret(t *testing.T) {
	t.Parallel()
	secrets := []string{"pw-s3cret", "url-s3cret", "tok-s3cret", "dash-s3cret", "creds-path-s3cret"}
	envs := map[string][]string{
		"password and URL": append(os.Environ(), "NATS_USER=operator", "NATS_PASSWORD=pw-s3cret",
			"NATS_URL=nats://operator:url-s3cret@127.0.0.1:4222", "AX_DASHBOARD_TOKEN=dash-s3cret", "NATS_CREDS=/tmp/creds-path-s3cret"),
		"token as user": append(os.Environ(), "NATS_USER=tok-s3cret", "NATS_PASSWORD=",
			"NATS_URL=nats://tok-s3cret@127.0.0.1:4222"),
	}
	paths := commandPaths()
	require.Greater(t, len(paths), 30, "the command tree")
	for name, env := range envs {
		t.Run(name, func(t *testing.T) {
			for _, path := range paths {
				for _, args := range [][]string{append(append([]string(nil), path...), "--help"), append([]string{"help"}, path...)} {
					stdout, stderr, code := axRun(t, env, args...)
					require.Zero(t, code, "ax %s: %s", strings.Join(args, " "), stderr)
					for _, s := range secrets {
						require.NotContains(t, stdout+stderr, s, "ax %s", strings.Join(args, " "))
					}
				}
			}
			out, _, _ := axRun(t, env, "submit", "--help")
			require.Contains(t, out, "(default $NATS_PASSWORD)")
			require.Contains(t, out, "(default $NATS_URL")
		})
	}
}

// Every unknown subcommand, and an unknown flag, fails with exit code 2
// and says what is unknown; before the fix `ax tasks list` printed the
// help of ax tasks and exited 0.
func TestUnknownSubcommandFails(t *testing.T) {
	t.Parallel()
	_, stderr, code := axRun(t, nil, "tasks", "list")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unknown command "list" for "ax tasks"`)
	require.Contains(t, stderr, "ls", "the suggestion")
	for _, path := range commandPaths() {
		args := append(append([]string(nil), path...), "no-such-command")
		_, stderr, code := axRun(t, nil, args...)
		if len(path) > 0 && !hasSubcommands(path) {
			continue // a command with arguments of its own
		}
		require.Equal(t, 2, code, "ax %s: %s", strings.Join(args, " "), stderr)
		require.Contains(t, stderr, `unknown command "no-such-command"`, "ax %s", strings.Join(args, " "))
	}
	_, stderr, code = axRun(t, nil, "stats", "--no-such-flag")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "unknown flag: --no-such-flag")
	_, stderr, code = axRun(t, nil, "task", "get")
	require.Equal(t, 2, code, stderr)
	_, stderr, code = axRun(t, nil, "bench", "no-such-scenario")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unknown scenario "no-such-scenario"`)
	_, stderr, code = axRun(t, nil, "help", "tasks", "list")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unknown help topic "tasks list"`)
	// Help and a group alone still succeed.
	_, stderr, code = axRun(t, nil, "tasks")
	require.Zero(t, code, stderr)
}

// hasSubcommands says whether the command at path groups others.
func hasSubcommands(path []string) bool {
	c, _, err := cli.NewRoot(io.Discard, io.Discard).Find(path)
	return err == nil && c.HasSubCommands()
}

// Each shipped role runs its commands with only NATS_USER and
// NATS_PASSWORD set, the sequence of docs/SECURITY.md, on the file it
// starts with (docs/ax-tenant-accounts.conf) and on the single-account
// one: the inbox prefix (_INBOX.<user>), the worker's id (its user) and
// the producers' --publish-only come from the user. The operator lists
// cron jobs; a refusal names the user and the command. Before the fix the
// producer's submit failed on the service's inbox, the worker's id was
// random (its cancel subject refused) and the operator's `ax cron ls` was
// refused.
func TestRolesNeedOnlyTheirUser(t *testing.T) {
	t.Parallel()
	for _, file := range []string{accountsFile, permissionsFile} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			rolesNeedOnlyTheirUser(t, file)
		})
	}
}

func rolesNeedOnlyTheirUser(t *testing.T, file string) {
	srv := startRoleServer(t, file)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	sched := startAxAs(t, url, "scheduler", "scheduler")
	w := startAxAs(t, url, "worker-1", "worker")
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "campaigning") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler did not start:\n%s", sched.output())
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	require.False(t, w.exited(), "ax worker exited:\n%s", w.output())
	require.Contains(t, w.output(), "worker worker-1 joining")

	require.Equal(t, "only-service", strings.TrimSpace(mustAxAs(t, url, "service", "submit", "echo", "--payload", "hi", "--id", "only-service")))
	require.Equal(t, "only-acme", strings.TrimSpace(mustAxAs(t, url, "producer-acme", "submit", "echo", "--tenant", "acme", "--payload", "yo", "--id", "only-acme")))
	mustAxAs(t, url, "scheduler", "cron", "add", "nightly", "0 3 * * *", "--type", "echo", "--priority", "p1")
	for id, tenant := range map[string]string{"only-service": "default", "only-acme": "acme"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, _, err := runAxAs(url, "operator", time.Minute, "task", "get", id, "--tenant", tenant)
			assert.NoError(c, err)
			assert.Regexp(c, `State\s+SUCCEEDED`, out)
		}, 30*time.Second, 200*time.Millisecond, "task %s", id)
	}
	cron := mustAxAs(t, url, "operator", "cron", "ls")
	require.Regexp(t, `(?m)^nightly\s+0 3 \* \* \*\s+echo\s+default\s+p1\s`, cron)
	require.Contains(t, mustAxAs(t, url, "operator", "tasks", "ls", "--tenant", "acme"), "only-acme")
	require.Contains(t, mustAxAs(t, url, "operator", "workers"), "worker-1")

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})

	// A refusal says who may not run what, and what to do.
	_, stderr, err := runAxAs(url, "operator", 30*time.Second, "cron", "rm", "nightly")
	require.Error(t, err)
	require.Contains(t, stderr, "user operator may not run `ax cron rm`")
	require.Contains(t, stderr, "run as the scheduler user")
	require.NotContains(t, stderr, "publish-only")
	_, stderr, err = runAxAs(url, "service", 30*time.Second, "stats")
	require.Error(t, err)
	require.Contains(t, stderr, "user service may not run `ax stats`")
	require.NotContains(t, stderr, "_INBOX")
}

// A submit whose acknowledgement cannot be read (its reply inbox refused)
// was published and runs: ax says so and exits 3, never "not stored" (1).
// Before the fix it exited 1 with the permission error alone.
func TestSubmitMaybeStoredExitCode(t *testing.T) {
	t.Parallel()
	srv := startRoleServer(t, permissionsFile)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	startAxAs(t, url, "scheduler", "scheduler")
	startAxAs(t, url, "worker-1", "worker")

	cmd := exec.Command(axBinary, "submit", "echo", "--tenant", "acme", "--publish-only", "--payload", "yo", "--id", "unacked",
		"--inbox-prefix", "_INBOX.service")
	cmd.Env = roleEnv(url, "producer-acme")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	t.Logf("ax submit: exit %d: %s", cmd.ProcessState.ExitCode(), stderr.String())
	require.Equal(t, 3, cmd.ProcessState.ExitCode(), stderr.String())
	require.Contains(t, stderr.String(), "published unacked; its acknowledgement could not be read")
	require.Contains(t, stderr.String(), "the task may be stored")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, _, err := runAxAs(url, "operator", time.Minute, "task", "get", "unacked", "--tenant", "acme")
		assert.NoError(c, err)
		assert.Regexp(c, `State\s+SUCCEEDED`, out)
	}, 30*time.Second, 200*time.Millisecond, "the task was stored and runs")

	// A publish the server refuses is not stored: exit 1, and it says so.
	_, stderr2, err := runAxAs(url, "producer-acme", 30*time.Second, "submit", "echo", "--tenant", "globex", "--id", "refused")
	require.Error(t, err)
	require.Contains(t, stderr2, "user producer-acme may not run `ax submit`: the server refused it publish ax.submit.p2.globex.echo.refused")
	require.NotContains(t, stderr2, "may be stored")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
}

// ax tasks ls filters by state, type and tenant, pages with --after and
// prints a table or JSON.
func TestTasksLs(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	s := dev.url
	for i := range 5 {
		submitCLI(t, s, "echo", "--tenant", "acme", "--id", fmt.Sprintf("ls-acme-%d", i), "--priority", "p2")
	}
	submitCLI(t, s, "echo", "--tenant", "globex", "--id", "ls-globex")
	submitCLI(t, s, "fail", "--tenant", "acme", "--id", "ls-fail")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := runAx(c, "tasks", "ls", "--server", s, "--state", "succeeded", "--type", "echo", "--json")
		var reply admin.TasksListReply
		if assert.NoError(c, json.Unmarshal([]byte(out), &reply)) {
			assert.Equal(c, 6, reply.Matched)
		}
	}, 30*time.Second, 100*time.Millisecond)

	var seen []string
	after := ""
	for page := 0; ; page++ {
		require.Less(t, page, 5)
		args := []string{"tasks", "ls", "--server", s, "--tenant", "acme", "--type", "echo", "--limit", "2", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		var reply admin.TasksListReply
		require.NoError(t, json.Unmarshal([]byte(runAx(t, args...)), &reply))
		require.Equal(t, 5, reply.Matched)
		for _, rec := range reply.Tasks {
			require.Equal(t, "acme", rec.Tenant)
			require.Equal(t, kv.StateSucceeded, rec.State)
			seen = append(seen, rec.ID)
		}
		if reply.Next == "" {
			break
		}
		after = reply.Next
	}
	require.ElementsMatch(t, []string{"ls-acme-0", "ls-acme-1", "ls-acme-2", "ls-acme-3", "ls-acme-4"}, seen)

	table := runAx(t, "tasks", "ls", "--server", s, "--tenant", "acme", "--limit", "3")
	require.Regexp(t, `(?m)^ID\s+TENANT\s+TYPE\s+PRIORITY\s+STATE\s+ATTEMPT\s+UPDATED`, table)
	require.Regexp(t, `(?m)^ls-\S+\s+acme\s+(echo|fail)\s+p2\s`, table)
	require.Contains(t, table, "\n3 of 6 tasks\nmore follow: the same command with --after ")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Regexp(c, `(?m)^ls-fail\s+acme\s+fail\s+p2\s+DEAD\s`, runAx(c, "tasks", "ls", "--server", s, "--state", "dead"))
	}, 30*time.Second, 100*time.Millisecond)
	_, stderr, code := axRun(t, nil, "tasks", "ls", "--server", s, "--state", "bogus")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "BOGUS")
}

// One syntax: a pause names its target as a limit does (TYPE,
// tenant:NAME), the old flags still work; ax dashboard serves on --addr
// (--listen is the NATS address of ax dev and ax server); a priority is
// printed p0..p4 everywhere; durations are rounded; every command logs the
// same console lines with ISO 8601 times, or JSON with --log-format json.
func TestOneSyntax(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	s := dev.url
	require.Contains(t, runAx(t, "pause", "tenant:acme", "--server", s), "paused tenant:acme")
	require.Contains(t, runAx(t, "pause", "report", "--server", s), "paused report")
	out := runAx(t, "resume", "report", "--server", s)
	require.NotContains(t, out, "paused report")
	require.Contains(t, out, "paused tenant:acme")
	require.NotContains(t, runAx(t, "resume", "--tenant", "acme", "--server", s), "paused tenant:acme", "the old flag")
	_, stderr, code := axRun(t, nil, "pause", "key:order-*", "--server", s)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "a task type or tenant:NAME")

	id := submitCLI(t, s, "sleep", "--payload", `{"ms":37}`, "--priority", "p3")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Regexp(c, `State\s+SUCCEEDED`, runAx(c, "task", "get", id, "--server", s))
	}, 30*time.Second, 50*time.Millisecond)
	require.Regexp(t, `Priority\s+p3\n`, runAx(t, "task", "get", id, "--server", s))
	// Durations for humans: three significant digits (the sleep's p50 was
	// printed 37.212345ms). The 37 ms sleep may run longer on a loaded
	// machine, and the per-type row may lag the record by a scrape.
	var stats string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stats = runAx(c, "stats", "--server", s)
		assert.Regexp(c, `(?m)^p3\s+0\s`, stats)
		assert.Regexp(c, `(?m)^sleep\s.*\s(3[7-9]|[4-9]\d)(\.\d)?ms\s|^sleep\s.*\s\d{3}ms\s`, stats)
	}, 30*time.Second, 200*time.Millisecond)
	for _, m := range regexp.MustCompile(`(\d+)\.(\d+)(ns|µs|ms|s)\b`).FindAllStringSubmatch(stats, -1) {
		require.LessOrEqual(t, len(strings.TrimLeft(m[1]+m[2], "0")), 3, "a duration for humans: %s", m[0])
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dash := startAx(t, "dashboard", "--addr", addr, "--server", s)
	require.Eventually(t, func() bool { return strings.Contains(dash.output(), "dashboard on http://"+addr) || dash.exited() },
		30*time.Second, 50*time.Millisecond, "ax dashboard --addr:\n%s", dash.output())

	iso := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\s+(INFO|WARN)\s`)
	wk := startAx(t, "worker", "--server", s, "--id", "console-worker")
	require.Eventually(t, func() bool { return iso.MatchString(wk.output()) && strings.Contains(wk.output(), "worker_started") },
		30*time.Second, 50*time.Millisecond, "console lines with ISO 8601 times:\n%s", wk.output())
	js := startAx(t, "worker", "--server", s, "--id", "json-worker", "--log-format", "json")
	require.Eventually(t, func() bool { return strings.Contains(js.output(), `"msg":"worker_started"`) }, 30*time.Second, 50*time.Millisecond, js.output())
	for line := range strings.Lines(js.output()) {
		var entry struct {
			TS string `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.TS != "" {
			_, err := time.Parse(time.RFC3339Nano, entry.TS)
			require.NoError(t, err, line)
		}
	}
}
