package streams

import (
	"fmt"
	"strings"
)

// Reasons a subject under a submit root ([Names.SubmitRoots]) is accepted
// by no priority bucket.
const (
	// RejectTokens: the subject does not have the six tokens of
	// "<prefix>.submit.p<N>.<tenant>.<type>.<key>" (a dot in a token, a
	// token left out).
	RejectTokens = "tokens"
	// RejectPriority: the subject has six tokens but its priority token is
	// not p0..p4 ("p9", "P0", "2").
	RejectPriority = "priority"
	// RejectUnbound: the subject has the shape of a submit, but no priority
	// stream of the deployment captures it (a stream missing, or a root the
	// streams do not list). Only a sample ([Names.MatchesAny]) can tell.
	RejectUnbound = "unbound"
)

// submitTokens is the token count of a submit subject.
const submitTokens = 6

// SubmitRoots returns the subject roots under which producers publish
// tasks: "<prefix>.submit" and "<prefix>.core", each followed by
// ".p<N>.<tenant>.<type>.<key>".
func (n Names) SubmitRoots() []string {
	return []string{n.Prefix() + ".submit", n.Prefix() + ".core"}
}

// PriorityTypos are the wrong priority tokens that [Names.RejectWatchSubjects]
// watches: an upper-case P, a priority past p4, a bare digit, a bare "p".
var PriorityTypos = []string{
	"P0", "P1", "P2", "P3", "P4",
	"p5", "p6", "p7", "p8", "p9",
	"0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
	"p",
}

// RejectWatchSubjects returns subscriptions that receive only subjects no
// priority bucket accepts, and so never a valid submit: for each submit
// root R, the root itself, R.*, R.*.*, R.*.*.* (too few tokens),
// R.*.*.*.*.> (too many), and R.<typo>.*.*.* for each of [PriorityTypos].
// A subscription on them costs nothing on the hot path. A wrong priority
// token outside [PriorityTypos] ("px", "high") is not among them: the only
// pattern that would see it, R.*.*.*.*, also receives every valid submit.
func (n Names) RejectWatchSubjects() []string {
	var out []string
	for _, root := range n.SubmitRoots() {
		out = append(out, root, root+".*", root+".*.*", root+".*.*.*", root+".*.*.*.*.>")
		for _, typo := range PriorityTypos {
			out = append(out, root+"."+typo+".*.*.*")
		}
	}
	return out
}

// SubmitRejection says why no priority bucket accepts subject, a subject
// under one of [Names.SubmitRoots], judged by its shape: reason
// [RejectTokens] or [RejectPriority] and a sentence for an operator, or
// two empty strings when a bucket accepts the shape.
func (n Names) SubmitRejection(subject string) (reason, detail string) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != submitTokens {
		return RejectTokens, fmt.Sprintf("%d tokens, want %d: %s.p<N>.<tenant>.<type>.<key>",
			len(tokens), submitTokens, strings.Join(tokens[:min(2, len(tokens))], "."))
	}
	if _, err := ParsePriority(tokens[2]); err != nil {
		return RejectPriority, fmt.Sprintf("priority token %q is not p0..p%d", tokens[2], Priorities-1)
	}
	return "", ""
}

// MatchesAny reports whether subject matches one of filters, NATS subject
// filters with the wildcards "*" (one token) and ">" (one or more tokens,
// last).
func MatchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
