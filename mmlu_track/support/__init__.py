"""What every part may use: credentials masking, the console, resource paths, errors."""
