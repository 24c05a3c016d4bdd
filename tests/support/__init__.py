"""Helpers the test modules share (test modules never import each other)."""
