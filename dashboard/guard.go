package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

// tokenHeader carries the dashboard's action token on every action request.
const tokenHeader = "X-Ax-Token"

// defaultHosts are the names the Host header may always carry: the loopback
// names a local browser uses.
var defaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// hostGuard refuses a request whose Host header names no allowed host, so
// that a page of another site whose name was rebound to the dashboard's
// address (DNS rebinding) is answered 421 before any handler runs: its
// requests carry the attacker's name as Host.
type hostGuard struct {
	mu    sync.RWMutex
	hosts map[string]bool // lower-case, without port (mu)
}

func newHostGuard(extra []string) *hostGuard {
	g := &hostGuard{hosts: map[string]bool{}}
	for _, h := range append(append([]string(nil), defaultHosts...), extra...) {
		g.allow(h)
	}
	return g
}

// allow adds host (a name or an address, with or without a port); an
// unspecified address (0.0.0.0, ::) adds nothing.
func (g *hostGuard) allow(host string) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return
	}
	g.mu.Lock()
	g.hosts[host] = true
	g.mu.Unlock()
}

func (g *hostGuard) allowed(hostHeader string) bool {
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.hosts[host]
}

func (g *hostGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allowed(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("%w: %q (add it with --allow-host)", ErrUnknownHost, r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// newToken returns a random action token: 128 bits, hex.
func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("dashboard: action token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// tokenOK reports whether r carries the action token, compared in constant time.
func tokenOK(r *http.Request, token string) bool {
	got := r.Header.Get(tokenHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
