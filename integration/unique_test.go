package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A producer submits unique tasks with its role's permissions, in the
// shipped file and with each tenant in an account of its own, and cannot
// read, write or take another tenant's claims or read its records: the
// same unique key of two tenants is two tasks.
func TestUniqueClaimsStayInTheirTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, file := range []string{permissionsFile, accountsFile} {
		t.Run(file, func(t *testing.T) {
			srv := natstest.Start(t, natstest.Options{ConfigFile: file})
			control := connectAs(t, srv, "scheduler")
			natstest.Provision(t, control.js, nil)
			client := func(user string) *ax.Client {
				rc := connectAs(t, srv, user)
				c, err := ax.NewClient(ctx, rc.js, &ax.Config{PublishOnly: true})
				require.NoError(t, err)
				return c
			}
			acme, globex := client("producer-acme"), client("producer-globex")
			spec := func(tenant string) ax.TaskSpec {
				return ax.TaskSpec{Type: "report", Tenant: tenant, Payload: []byte("same"), Unique: &ax.UniqueOpts{Key: "nightly", For: time.Hour}}
			}
			a1, err := acme.Submit(ctx, spec("acme"))
			require.NoError(t, err)
			require.False(t, a1.UniqueSkipped)
			a2, err := acme.Submit(ctx, spec("acme"))
			require.NoError(t, err)
			require.True(t, a2.UniqueSkipped)
			require.Equal(t, a1.ID, a2.ID)
			g1, err := globex.Submit(ctx, spec("globex"))
			require.NoError(t, err)
			require.False(t, g1.UniqueSkipped, "globex's key is globex's own")
			require.Equal(t, uint64(2), bucketCount(t, control, "AX_P2"))

			// The record of a task a worker saw decides: a DEAD one frees the key.
			store, err := kv.NewStore(ctx, control.js, nil)
			require.NoError(t, err)
			_, _, err = store.Create(ctx, &kv.Record{ID: a1.ID, Tenant: "acme", Type: "report", Key: a1.ID, State: kv.StateDead}, kv.Actor{})
			require.NoError(t, err)
			a3, err := acme.Submit(ctx, spec("acme"))
			require.NoError(t, err)
			require.False(t, a3.UniqueSkipped, "acme reads its own record")
			require.Equal(t, uint64(3), bucketCount(t, control, "AX_P2"))

			// acme may not touch globex's claim nor read its record.
			theirs := kv.ClaimKey("globex", ax.UniqueHash("report", "nightly", nil))
			for _, subject := range []string{
				"$KV.AX_UNIQUE." + theirs,
				"$JS.API.DIRECT.GET.KV_AX_UNIQUE.$KV.AX_UNIQUE." + theirs,
				"$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS." + kv.Ref{Tenant: "globex", ID: g1.ID}.Key(),
				"$JS.API.DIRECT.GET.KV_AX_TASKS",
				"$JS.API.STREAM.INFO.KV_AX_UNIQUE",
			} {
				rc := connectAs(t, srv, "producer-acme")
				_, err := rc.nc.Request(subject, []byte(`{"tenant":"acme","id":"mine"}`), 500*time.Millisecond)
				require.Error(t, err, subject)
				rc.requireViolation(t, "Publish", subject)
			}
			// Nor purge every tenant's claims with a roll-up on its own key.
			rc := connectAs(t, srv, "producer-acme")
			rollup := nats.NewMsg("$KV.AX_UNIQUE." + kv.ClaimKey("acme", "x"))
			rollup.Header.Set("Nats-Rollup", "all")
			_, err = rc.js.PublishMsg(ctx, rollup)
			require.ErrorContains(t, err, "rollup", "the bucket refuses roll-ups")
			claims := kv.NewClaims(control.js, streams.Names{})
			claim, _, err := claims.Get(ctx, theirs)
			require.NoError(t, err)
			require.Equal(t, g1.ID, claim.ID, "globex's claim is as globex wrote it")
		})
	}
}

// A producer whose permissions lack what unique tasks need gets one clear
// error naming the subject, at once, and publishes nothing.
func TestUniqueWithoutItsPermissionFailsFast(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(permissionsFile)
	require.NoError(t, err)
	const lacking = `,
                                "$JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS.acme.>"`
	require.Contains(t, string(shipped), lacking)
	path := filepath.Join(t.TempDir(), "ax-permissions.conf")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(shipped), lacking, "", 1)), 0o600))
	srv := startRoleServer(t, path)
	url := srv.ClientURL()
	mustAxAs(t, url, "scheduler", "provision")
	args := []string{"submit", "echo", "--publish-only", "--tenant", "acme", "--inbox-prefix", "_INBOX.producer-acme", "--unique-for", "1h"}
	require.Equal(t, "first", strings.TrimSpace(mustAxAs(t, url, "producer-acme", append(args, "--id", "first")...)))
	start := time.Now()
	_, stderr, err := runAxAs(url, "producer-acme", 30*time.Second, append(args, "--id", "second")...)
	require.Error(t, err)
	require.Less(t, time.Since(start), 4*time.Second, stderr)
	require.Contains(t, stderr, "permission denied: user producer-acme may not run `ax submit`: the server refused it publish $JS.API.DIRECT.GET.KV_AX_TASKS.$KV.AX_TASKS.acme.first (docs/ax-permissions.conf)")
	require.Contains(t, stderr, "AX_UNIQUE")
	require.Equal(t, 1, strings.Count(stderr, "permission denied"), stderr)
	control := connectAs(t, srv.Server, "scheduler")
	require.Equal(t, uint64(1), bucketCount(t, control, "AX_P2"), "the second submit published nothing")
}

// The nats commands of docs/OPERATIONS.md, "Unique tasks", run as written
// against a live ax dev, do what the doc says, and the ax CLI honours a
// raw producer's claim.
func TestUniqueWithNatsCLI(t *testing.T) {
	nats := natsCLI(t)
	dev := startDev(t)
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	home := t.TempDir()
	run := func(line string) (string, error) {
		t.Helper()
		if !strings.HasPrefix(line, "nats kv del ") { // documented with <key>
			require.Contains(t, string(doc), "\n"+line+"\n", "the command is documented as written")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Env = append(os.Environ(), "NATS_URL="+dev.url, "HOME="+home,
			"PATH="+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(line string) string {
		t.Helper()
		out, err := run(line)
		require.NoError(t, err, "%s:\n%s", line, out)
		return out
	}
	const key = "acme.ac69d7be9e5e5313614c39d75adf3f7b2e05a9959f005aa63463f24a5b059826"
	require.Contains(t, must(`printf 'report\nkey\n%s' nightly | sha256sum`), strings.TrimPrefix(key, "acme."))
	require.Equal(t, key, kv.ClaimKey("acme", ax.UniqueHash("report", "nightly", nil)))

	claim := `nats pub -J '$KV.AX_UNIQUE.` + key + `' '{"tenant":"acme","id":"report-1","type":"report"}' -H Nats-Expected-Last-Subject-Sequence:0 -H Nats-TTL:1h`
	must(claim)
	out, err := run(claim)
	require.Error(t, err, "a second claim is refused:\n%s", out)
	require.Contains(t, out, "wrong last sequence")
	must(`nats pub -J ax.submit.p2.acme.report.report-1 '{"day":1}' -H Nats-Msg-Id:report-1`)
	require.Contains(t, must(`nats kv get AX_UNIQUE `+key+` --raw`), `"id":"report-1"`)
	require.Contains(t, must(`nats stream subjects KV_AX_UNIQUE`), key)
	require.Contains(t, must(`nats req '$JS.API.DIRECT.GET.KV_AX_UNIQUE.$KV.AX_UNIQUE.`+key+`' ''`), `"id":"report-1"`)

	// The ax CLI finds the raw producer's task holding the key.
	submit := []string{"submit", "report", "--server", dev.url, "--tenant", "acme", "--unique-key", "nightly", "--unique-for", "1h"}
	require.Equal(t, "report-1 (duplicate: this task holds the unique key; nothing published)", strings.TrimSpace(runAx(t, submit...)))
	require.Contains(t, string(doc), "`nats kv del AX_UNIQUE <key> -f`")
	must(`nats kv del AX_UNIQUE ` + key + ` -f`)
	require.NotContains(t, strings.TrimSpace(runAx(t, submit...)), "duplicate", "a deleted claim frees the key")
}
