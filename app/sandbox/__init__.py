"""Running snippets away from the server process."""
