package axtype

// Args is the payload of one task type, written once: Kind names the type
// and the value's JSON form is the payload. A producer submits it with
// ax's Client.SubmitJSON and a worker registers the same Go type with
// worker.HandleArgs, so producer and handler cannot disagree on the type
// string or the payload's shape. Kind is called on the zero value too: it
// must not read the value's fields.
type Args interface {
	Kind() string
}
