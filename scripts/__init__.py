"""Thin command lines over runner/ and models/."""
