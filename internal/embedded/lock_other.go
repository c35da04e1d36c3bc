//go:build !unix

package embedded

// lockDataDir does not lock on this platform: run one server per data dir.
func lockDataDir(string, string) (func(), error) { return func() {}, nil }
