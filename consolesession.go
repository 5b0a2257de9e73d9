package checkpointd

import "time"

// ConsoleSession is a person signed in to the operator console, as the
// daemon keeps it so that any replica serves them: by digests, never the
// cookie nor the token.
type ConsoleSession struct {
	// IDDigest is the SHA-256 (hex) of the session's cookie value.
	IDDigest string
	// TokenHash is HashToken of the token the person signed in with: the
	// console's calls to the API in process authenticate by it.
	TokenHash string
	Principal Principal
	CreatedAt time.Time
	// LastSeenAt is the last request's time, written at most once per
	// ConsoleSeenInterval.
	LastSeenAt time.Time
	// Forge is set for a person signed in with the forge.
	Forge *ForgeGrant
}

// ForgeGrant is what a console session signed in with the forge holds.
type ForgeGrant struct {
	Login string
	// OAuth is the forge's OAuth token (its JSON); the store seals it.
	OAuth []byte
	// CheckedAt is when the forge last confirmed the person's access.
	CheckedAt time.Time
}

// ConsoleSeenInterval is how often a console session's last request is
// written at most: an idle timeout of hours needs no finer clock, and a
// page's every request would otherwise be a write.
const ConsoleSeenInterval = time.Minute

// Idle reports whether the session has gone unused for longer than idle
// at now.
func (s *ConsoleSession) Idle(now time.Time, idle time.Duration) bool {
	return now.Sub(s.LastSeenAt) > idle
}
