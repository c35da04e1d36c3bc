//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFile is the lock of a data directory, held by the process that
// serves it.
const lockFile = "ax.lock"

// lockDataDir takes an exclusive lock on dir (creating it), so that no two
// servers ever share one JetStream store: a second owner gets an error that
// names the holder. The lock is the kernel's (flock), so it ends with its
// process, however that ends. It returns the function that releases it.
func lockDataDir(dir, listen string) (func(), error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: data dir %s is in use by another server (%s); stop it, or pass another --data",
				ErrDataDirInUse, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt(fmt.Appendf(nil, "pid %d, listening on %s, since %s\n", os.Getpid(), listen, time.Now().UTC().Format(time.RFC3339)), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
