"""Pure statistics: paired proportions, sequential betting tests, the noise margin."""
