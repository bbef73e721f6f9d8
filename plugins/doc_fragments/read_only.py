# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by the collection's read-only modules (facts, topology, planning)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Read only; runs in check mode too.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
"""
