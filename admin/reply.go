package admin

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"
)

// Every reply must fit in one NATS message: the server's max_payload
// (nc.MaxPayload, 1 MiB by default) bounds headers and body. A reply that
// can grow (lists, reports, trails) is cut below it by its verb and says
// so (Truncated, and where a list is involved a cursor for the next page);
// any other reply too large to send becomes an error reply with
// [CodeTooLarge]. An error reply carries its code and message in the micro
// error headers (the message on one line, at most maxErrorHeader bytes)
// and the whole [Error] as its JSON body, cut to fit.
const (
	// replyMargin is kept free below max_payload for what the server adds
	// and the JSON of a reply's own fields.
	replyMargin = 2 << 10
	// maxErrorHeader bounds the error message of the Nats-Service-Error
	// header.
	maxErrorHeader = 1 << 10
)

// replyBudget is how many bytes of JSON a reply may take.
func (a *Service) replyBudget() int {
	return max(int(a.js.Conn().MaxPayload())-replyMargin, 1<<10)
}

// roomFor is how many bytes of the reply budget are left for the elements
// of the lists of reply, encoded with its lists empty.
func (a *Service) roomFor(reply any) int {
	b, err := json.Marshal(reply)
	if err != nil {
		return 0
	}
	return a.replyBudget() - len(b)
}

// fit returns how many of items, from the first, fit in room bytes as the
// elements of a JSON array, and the bytes they take.
func fit[T any](items []T, room int) (int, int) {
	used := 0
	for i, item := range items {
		b, err := json.Marshal(item)
		if err != nil || used+len(b)+1 > room {
			return i, used
		}
		used += len(b) + 1
	}
	return len(items), used
}

// fitMap keeps the entries of m, in key order, that fit in room bytes as a
// JSON object's, and reports how many it dropped and the bytes kept.
func fitMap(m map[string]string, room int) (int, int) {
	keys := slices.Sorted(maps.Keys(m))
	used, dropped := 0, 0
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(m[k])
		if n := len(kb) + len(vb) + 2; used+n <= room {
			used += n
			continue
		}
		delete(m, k)
		dropped++
	}
	return dropped, used
}

// respond sends reply, or an error reply when it cannot: too large
// ([CodeTooLarge]), or not sent at all.
func (a *Service) respond(r micro.Request, verb string, reply any) {
	body, err := json.Marshal(reply)
	if err != nil {
		a.respondError(r, verb, &Error{Code: CodeInternal, Message: fmt.Sprintf("encode %s reply: %s; please report it", verb, err)})
		return
	}
	if limit := a.js.Conn().MaxPayload(); int64(len(body)) > limit {
		a.log.Warn("admin_reply_too_large", zap.String("verb", verb), zap.Int("bytes", len(body)), zap.Int64("max_payload", limit))
		a.respondError(r, verb, &Error{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the %s reply takes %d bytes, more than the server's max_payload (%d): narrow the request (a filter, a lower limit) or raise max_payload",
			verb, len(body), limit)})
		return
	}
	if err := r.Respond(body); err != nil {
		a.log.Warn("admin_respond", zap.String("verb", verb), zap.Error(err))
		a.respondError(r, verb, &Error{Code: CodeInternal, Message: fmt.Sprintf("send the %s reply: %s", verb, err)})
	}
}

// respondError sends an error reply: the code and the message (on one
// line, cut to maxErrorHeader) in the micro error headers, the [Error] as
// the JSON body (its message cut to the reply budget). If that cannot be
// sent, a bare one with the code and a short message is.
func (a *Service) respondError(r micro.Request, verb string, ae *Error) {
	code := strconv.Itoa(ae.Code)
	header := oneLine(ae.Message, maxErrorHeader)
	full := *ae
	full.Message = cut(full.Message, a.replyBudget()-maxErrorHeader)
	body, _ := json.Marshal(&full)
	if err := r.Error(code, header, body); err != nil {
		a.log.Warn("admin_error_reply", zap.String("verb", verb), zap.Int("code", ae.Code), zap.Error(err))
		_ = r.Error(code, oneLine(fmt.Sprintf("%s failed (code %d); its error reply could not be sent: %s", verb, ae.Code, err), maxErrorHeader), nil)
	}
}

// oneLine returns s with line breaks as spaces (a header value is one
// line), cut to n bytes.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if s == "" {
		s = "error"
	}
	return cut(s, n)
}

// cut returns s cut to at most n bytes at a UTF-8 boundary, with a marker
// naming its full length.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf(" …[cut: %d bytes in all]", len(s))
	end := max(n-len(marker), 0)
	for end > 0 && end < len(s) && s[end]&0xC0 == 0x80 {
		end--
	}
	return s[:end] + marker
}
