package store

// TokenCacheListening reports whether the store's authentication cache is
// in use: on PostgreSQL, once its revocation listener listens.
func TokenCacheListening(s *Store) bool { return s.tokens.listening() }
