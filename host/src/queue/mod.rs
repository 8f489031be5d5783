//! A work queue with client-go semantics: dedup, delaying and rate limiting.
