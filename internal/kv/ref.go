package kv

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/ax-mesh/ax/internal/streams"
)

// Ref names one task: its tenant and its id. A task id belongs to its
// tenant: two tenants' equal ids are two tasks, with two records.
type Ref struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
}

// Ref returns the reference of the record's task.
func (r *Record) Ref() Ref { return Ref{Tenant: r.Tenant, ID: r.ID} }

// String writes the reference for people: "order-42 (tenant acme)".
func (r Ref) String() string { return fmt.Sprintf("%s (tenant %s)", r.ID, r.Tenant) }

// Validate reports whether r can name a task: a tenant that is a subject
// token and a valid task id.
func (r Ref) Validate() error {
	if err := streams.ValidateToken("tenant", r.Tenant); err != nil {
		return err
	}
	return streams.ValidateTaskID(r.ID)
}

// Key returns the key of the task's record in AX_TASKS: "<tenant>.<id>".
// A tenant made of letters, digits, '-', '_' and '/' is written as is; any
// other tenant (a subject token may hold characters a KV key may not) is
// written as '=' and its base64url form, which no tenant written as is
// starts with, so that two tenants never share a key.
func (r Ref) Key() string { return tenantKey(r.Tenant) + "." + r.ID }

// ParseKey reads a record key written by [Ref.Key]. A key without a tenant
// is [ErrForeignKey].
func ParseKey(key string) (Ref, error) {
	tenant, id, ok := strings.Cut(key, ".")
	if !ok {
		return Ref{}, fmt.Errorf("task record key %q has no tenant: %w", key, ErrForeignKey)
	}
	if encoded, ok := strings.CutPrefix(tenant, "="); ok {
		raw, err := base64.RawURLEncoding.DecodeString(encoded)
		if err != nil {
			return Ref{}, fmt.Errorf("task record key %q: tenant %q is not base64url: %w", key, encoded, err)
		}
		tenant = string(raw)
	}
	ref := Ref{Tenant: tenant, ID: id}
	if err := ref.Validate(); err != nil {
		return Ref{}, fmt.Errorf("task record key %q: %w", key, err)
	}
	return ref, nil
}

// tenantKey is the tenant's token in a record key.
func tenantKey(tenant string) string {
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/') {
			return "=" + base64.RawURLEncoding.EncodeToString([]byte(tenant))
		}
	}
	return tenant
}
