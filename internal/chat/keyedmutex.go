package chat

import (
	"context"
	"sync"
)

// keyedMutex is a mutex per key (a session id) whose Lock gives up when its context ends. Keys nobody
// holds or waits for take no memory.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	c     chan struct{} // holds a token while the lock is held
	users int           // holders and waiters
}

// lock takes the key's lock and returns the function that releases it; ctx ending first is its error.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{c: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	select {
	case l.c <- struct{}{}:
		return func() {
			<-l.c
			k.done(key, l)
		}, nil
	case <-ctx.Done():
		k.done(key, l)
		return nil, ctx.Err()
	}
}

// done drops one user of the key's lock, and the lock with the last.
func (k *keyedMutex) done(key string, l *keyedLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(k.locks, key)
	}
}
