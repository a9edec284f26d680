package burrow

import (
	"context"
	"sync"
)

// stream is a file stream's core object (a FileReader's or a
// FileWriter's), which a Close or Abandon of another goroutine may close
// while a call waits on it. Calls take the object with acquire and give
// it back with put; the object is freed once it is done (no more calls)
// and no call uses it, never under a call of another goroutine.
type stream struct {
	mu     sync.Mutex
	obj    *object
	users  int  // calls out on obj
	closed bool // the core's close op was sent (or needs not be)
	done   bool // no call is made on obj any more: freed once unused
}

// acquire is the object for one call, nil once the stream is done.
func (s *stream) acquire() *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.obj == nil {
		return nil
	}
	s.users++
	return s.obj
}

// put ends a call of acquire; with end, no call is made any more.
func (s *stream) put(end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users--
	if end {
		s.done = true
	}
	s.freeIfUnused()
}

func (s *stream) freeIfUnused() {
	if s.done && s.users == 0 && s.obj != nil {
		s.obj.release()
		s.obj = nil
	}
}

// isClosed is whether close was called.
func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close sends the core's close op, once: a call waiting on the object
// ends at once and the guest's file is released now, not when the object
// is collected. With end, the object is freed as well (once unused);
// without, later calls still reach the core (which refuses them).
func (s *stream) close(end bool) error {
	s.mu.Lock()
	send := !s.closed && !s.done && s.obj != nil
	s.closed = true
	obj := s.obj
	if send {
		s.users++
	} else if end {
		s.done = true
		s.freeIfUnused()
	}
	s.mu.Unlock()
	if !send {
		return nil
	}
	// Not the stream's context: its end may be why the stream is closed.
	_, _, err := call(context.Background(), obj, op{"op": "close"}, nil)
	s.put(end)
	return err
}
