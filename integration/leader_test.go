package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// Scenario 3: SIGKILL the leader during a run with delayed and cron tasks:
// a new leader takes over within the lease TTL + 1 s, no cron fire is missed
// or doubled, and every delayed task fires once.
func TestLeaderDeath(t *testing.T) {
	t.Parallel()
	url, js, schedulers := startSchedulers(t)
	const ttl = leaderTTL
	journal := t.TempDir()
	for _, id := range []string{"w1", "w2"} {
		startAx(t, "worker", "--server", url, "--id", id, "--ack-wait", faultAckWait, "--probe-journal", filepath.Join(journal, id+".jsonl"))
	}
	ctx := context.Background()
	leader := func() string { return leaderOf(js) }
	require.Eventually(t, func() bool { return leader() != "" }, 30*time.Second, 50*time.Millisecond)

	runAx(t, "cron", "add", "tick", "@every 1s", "--type", "probe", "--payload", `{"ms":1}`, "--server", url)
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	var delayed []string
	start := time.Now()
	for i := range 200 {
		info, err := client.Submit(ctx, ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":1}`),
			RunAt: start.Add(3*time.Second + time.Duration(i)*50*time.Millisecond)})
		require.NoError(t, err)
		delayed = append(delayed, info.ID)
	}

	// Kill the leader while delayed tasks are coming due and cron is firing.
	time.Sleep(time.Until(start.Add(6 * time.Second)))
	old := leader()
	require.NotEmpty(t, old)
	schedulers[old].kill(t)
	killed := time.Now()
	var next string
	require.Eventually(t, func() bool { next = leader(); return next != "" && next != old }, 30*time.Second, 10*time.Millisecond)
	failover := time.Since(killed)
	require.LessOrEqual(t, failover, ttl+time.Second, "a new leader within the lease TTL + 1 s")

	m := &mesh{t: t, js: js, client: client}
	m.waitSucceeded(delayed, 2*time.Minute, nil)
	waitCronFires(t, client, time.Second, 3) // a few cron fires under the new leader
	runAx(t, "cron", "rm", "tick", "--server", url)

	// Every cron time between the first and the last fire has exactly one task.
	bucket, err := js.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	keys, err := bucket.ListKeys(ctx)
	require.NoError(t, err)
	var fires []int64
	var cronIDs []string
	for key := range keys.Keys() {
		ref, err := kv.ParseKey(key)
		if err != nil {
			continue
		}
		k := ref.ID
		if rest, ok := strings.CutPrefix(k, "cron-tick-"); ok { // cron-tick-<unix>-<secret>
			unix, _, _ := strings.Cut(rest, "-")
			v, err := strconv.ParseInt(unix, 10, 64)
			require.NoError(t, err)
			fires = append(fires, v)
			cronIDs = append(cronIDs, k)
		}
	}
	slices.Sort(fires)
	require.Greater(t, len(fires), 5)
	require.Less(t, fires[0], killed.Unix(), "fires before the kill")
	require.Greater(t, fires[len(fires)-1], killed.Unix()+1, "fires after the kill")
	for i := 1; i < len(fires); i++ {
		require.Equal(t, int64(1), fires[i]-fires[i-1], "missed cron times between %d and %d", fires[i-1], fires[i])
	}
	m.waitSucceeded(cronIDs, time.Minute, nil)

	// Each delayed and cron task ran once and applied its effect once.
	j := readJournals(t, journal, nil)
	effects := m.effects()
	for _, id := range append(delayed, cronIDs...) {
		require.Len(t, j.executions[id], 1, "task %s ran more than once", id)
		require.Contains(t, effects, id)
	}
	t.Logf("leader death: %s killed, %s leads %s later (TTL %s); %d delayed tasks fired once; %d cron fires, none missed or doubled",
		old, next, failover.Round(time.Millisecond), ttl, len(delayed), len(fires))
}
