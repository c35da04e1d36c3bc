package worker

// SetParkRoom sets the most bytes w parks for its limits (maxParkedBytes
// in a deployment), for a test that fills it; a test sets it before it
// submits.
func SetParkRoom(w *Worker, room int) {
	w.gate.mu.Lock()
	defer w.gate.mu.Unlock()
	w.gate.room = room
}

// Parked returns the deliveries w holds parked and the bytes it has
// reserved for them.
func Parked(w *Worker) (deliveries, bytes int) {
	w.gate.mu.Lock()
	defer w.gate.mu.Unlock()
	for _, q := range w.gate.parked {
		deliveries += len(q)
	}
	return deliveries, w.gate.bytes
}
