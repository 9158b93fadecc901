"""Test and benchmark support: nothing here is on a user's path."""
