"""The Gemini protocol (being built: issue 28)."""
