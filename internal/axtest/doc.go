// Package axtest is the one bundle of test helpers of ax's packages: a real
// JetStream server ([natstest]) with ax provisioned, a client and the
// record store ([Setup], [Bundle]), workers ([Bundle.StartWorker]), a
// leader ([Bundle.StartLeader]), the management API ([Bundle.StartAdmin]),
// a privileged user for a server started from the shipped permissions
// ([Options.User]; other roles connect with [natstest.Server.ConnectAs]),
// waits on a task's record that print its trail when they give up
// ([WaitState], [WaitRecord]), and the stand-in deployment of the examples
// ([RunDeployment]). A test that needs something else writes it next to
// itself; a helper two packages need goes here, never into a copy.
//
// # Who may import it
//
// axtest imports ax, worker, scheduler, admin and deploy (and through them
// kv, streams, control and internal/move). Go refuses an import cycle, so
// the internal test files (package x, for white-box tests) of those
// packages cannot import it: they start servers with [natstest] alone,
// which imports only control, kv and streams and whose own helpers
// ([natstest.Provision], [natstest.Server.ConnectAs], [natstest.StreamMsgs])
// are all they share. worker's park-room test, which needed a leader,
// became an external test through worker/export_test.go instead.
//
// External test packages (package x_test) may import axtest, and those of
// ax, worker, scheduler, admin, dashboard, metrics, internal/move and
// integration do. Two keep to natstest by choice:
//   - kv_test and streams_test test the storage layer beneath everything
//     axtest imports; they need a store or a stream, not a client or a
//     worker, and internal/kv/export_test.go would make kv's test binary compile
//     ax, admin, worker, scheduler and deploy again against kv's test
//     variant. kv's setup builds its store over natstest in four lines.
//   - deploy_test opens a deployment on a bare server: provisioning it is
//     what those tests test.
//
// # The fast tier
//
// [Options.Server] is passed to [natstest.Start] unchanged: a test of the
// fast tier (go test -short) sets Server.Fast, every other test that
// starts a server is skipped under -short.
//
// The check that a component's default logger is internal/stderrlog's is
// shared by internal test files, so it lives in the leaf package
// internal/stderrlog/stderrlogtest.
package axtest
