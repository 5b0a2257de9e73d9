package store

import "time"

// SetExclusiveTiming shortens RunExclusive's retry and keepalive for tests.
func SetExclusiveTiming(s *Store, retry, keepalive time.Duration) {
	s.exclusiveRetry, s.exclusiveKeepalive = retry, keepalive
}
