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
// axtest imports ax, worker, scheduler, admin and deploy, so the test
// files that may use it are those of external test packages (package
// x_test) and of packages none of those import. Go refuses an import
// cycle, so the internal test files (package x, for white-box tests) of
// ax, admin, worker, scheduler, deploy, kv, streams, control and
// internal/move cannot import it: they start servers with [natstest]
// alone (natstest imports only control, kv and streams; their own
// internal tests use nothing but the server starter). The external test
// packages kv_test and move_test do use axtest.
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
