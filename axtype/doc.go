// Package axtype holds the types that ax's producer ([github.com/ax-mesh/ax]),
// workers ([github.com/ax-mesh/ax/worker]) and operator API
// ([github.com/ax-mesh/ax/admin]) share, defined once: the payload of a task
// type ([Args]), its priority ([Priority], one type for the name a producer
// writes and the bucket number a worker reads), the states of a task and the
// one table of legal moves between them ([State]), a JSON duration
// ([Duration]) and the answer to a submit ([TaskInfo]).
//
// It is a leaf, as River's rivertype: it imports nothing of ax, so any
// package of ax, and any user's, may import it without pulling in a client,
// a worker or NATS. The other packages name these types with aliases
// (ax.Priority is axtype.Priority), so code written against them keeps
// compiling.
package axtype
