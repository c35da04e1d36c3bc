package worker

// Middleware wraps every handler the worker runs: it receives the next
// handler of the chain and returns the handler to run in its place. A
// middleware sees the task's context (its timeout, the cause of its end)
// and the task, its [Task.Headers] included, before and after next runs;
// it may change the context it passes on (a tracer starts a span from the
// task's headers), return without calling next (the task's outcome is
// then what it returns), or turn next's error into another.
//
// [Config.Middleware] lists them; the first is the outermost: with
// []Middleware{a, b} a task runs a(b(handler)). The worker's own panic
// recovery is outside all of them (a panic in a middleware or the
// handler fails the attempt permanently, "handler panicked"), and its
// outcome logging, metrics ([Observer]) and record writes are outside
// that: a middleware sees the handler's error before the worker decides
// the task's outcome from what the chain returns.
type Middleware func(next HandlerFunc) HandlerFunc

// chain wraps fn in middleware, the first outermost.
func chain(fn HandlerFunc, middleware []Middleware) HandlerFunc {
	for i := len(middleware) - 1; i >= 0; i-- {
		fn = middleware[i](fn)
	}
	return fn
}
