"""The bundled evaluation corpus: manifest loading, window listing and audio access."""
