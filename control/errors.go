package control

import "errors"

// ErrUndecodableDeadlines means the unserved deadlines in AX_CONTROL are
// not the JSON ax writes (edited by hand); setting any deadline with the
// management API replaces them.
var ErrUndecodableDeadlines = errors.New("unserved deadlines are not readable")
