"""admin/output.py: telling that stdout's reader has gone without writing to it."""

from __future__ import annotations

import io
import os
import sys

import pytest

from oncelog.admin.output import end_on_closed_output, reader_gone


def test_a_pipe_whose_reader_closed_is_gone_and_an_open_one_is_not():
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as writer:
        assert not reader_gone(writer)
        os.close(read_end)
        assert reader_gone(writer)


def test_files_buffers_and_no_stream_are_never_gone(tmp_path):
    with (tmp_path / "out").open("wb") as file:
        assert not reader_gone(file)
    assert not reader_gone(io.BytesIO())
    assert not reader_gone(None)


@pytest.mark.skipif(sys.platform != "linux", reason="elsewhere poll() may not tell, and the error is trusted")
def test_a_broken_pipe_of_no_closed_output_is_raised_again():
    """A BrokenPipeError from a broker's connection, say, is not hidden as exit status 141."""
    error = BrokenPipeError(32, "Broken pipe")
    with pytest.raises(BrokenPipeError) as raised:
        end_on_closed_output(error)
    assert raised.value is error
