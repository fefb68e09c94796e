"""Live events in a serving process: one LISTEN connection, fanned out to subscribers."""
