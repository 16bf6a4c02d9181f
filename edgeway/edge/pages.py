"""Answers the edge gives by itself: fixed responses (http_response backends) and the error
pages, HTML with the stable code in an ``Edgeway-Error-Code`` header. One implementation,
``edgeway.pages``, shared with the agent."""

from __future__ import annotations

from edgeway.pages import Fixed, page

__all__ = ["Fixed", "page"]
