package control

import "errors"

// ErrUndecodableDeadlines means the unserved deadlines in AX_CONTROL are
// not the JSON ax writes (edited by hand); setting any deadline with the
// management API replaces them.
var ErrUndecodableDeadlines = errors.New("unserved deadlines are not readable")

// ErrForeignValue means a control key holds a value ax did not write
// there: under a deployment whose producers share the AX account, the
// server writes a publish acknowledgement ({"stream":"AX_P2","seq":12})
// to any key a producer names as its reply subject (docs/SECURITY.md).
var ErrForeignValue = errors.New("value ax did not write")

// ErrForeignLimits means the limits key of the control bucket holds a
// value ax did not write there ([DecodeLimits]): a publish
// acknowledgement written over it through a reply subject, say, which
// would otherwise read as "no limit and no pause".
var ErrForeignLimits = errors.New("limits key holds a value ax did not write")
