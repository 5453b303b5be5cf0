"""Console views: thin interfaces over the runtime's verbs (one form, one call, one fragment)."""
