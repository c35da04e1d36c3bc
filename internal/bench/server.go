package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// child is a NATS server in its own process (`ax server`), reached over
// loopback TCP like a deployment's, with its monitoring endpoints on.
type child struct {
	cmd     *exec.Cmd
	url     string // nats://127.0.0.1:port
	monitor string // http://127.0.0.1:port
	exited  chan struct{}
}

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startChild runs argv (e.g. the ax binary and "server") with a listen
// address, a monitoring address, dir as its data directory and sync as its
// flush policy, and waits until it accepts clients and answers /varz.
func startChild(ctx context.Context, argv []string, dir, sync string) (*child, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append(argv[1:len(argv):len(argv)], "--name", "ax-bench", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--monitor", fmt.Sprintf("127.0.0.1:%d", mport), "--data", filepath.Join(dir, "data"))
	if sync != "" {
		args = append(args, "--sync", sync)
	}
	cmd := exec.Command(argv[0], args...)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start server %s: %w", argv[0], err)
	}
	c := &child{cmd: cmd, url: fmt.Sprintf("nats://127.0.0.1:%d", port), monitor: fmt.Sprintf("http://127.0.0.1:%d", mport), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	deadline := time.After(30 * time.Second)
	for {
		var v server.Varz
		if c.get("/varz", &v) == nil && v.Port == port {
			if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				_ = conn.Close()
				return c, nil
			}
		}
		select {
		case <-c.exited:
			out, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("bench: server exited: %s", strings.TrimSpace(string(out)))
		case <-deadline:
			c.stop()
			return nil, fmt.Errorf("bench: server not ready within 30s")
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// get decodes a monitoring endpoint's JSON into v.
func (c *child) get(path string, v any) error {
	resp, err := http.Get(c.monitor + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// cpu returns the server process's CPU time (user + system) from
// /proc/<pid>/stat, or 0 where there is no /proc.
func (c *child) cpu() time.Duration {
	return ProcCPU(c.cmd.Process.Pid)
}

// clockTick is the kernel's USER_HZ, which is 100 on every Linux that Go
// supports.
const clockTick = 100

// ProcCPU returns the CPU time (user + system) of process pid from
// /proc/<pid>/stat, or 0 where there is no /proc.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTick
}

// SelfCPU returns this process's CPU time (user + system).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stop ends the server (SIGTERM, then SIGKILL after 30 s).
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
