# Python kernel of the local execd's code interpreter: one long-lived process per code context.
#
# Protocol (see code-kernel.js): requests arrive on fd 3 as JSON lines {"code": "...", "marker": "..."};
# replies go back on fd 3 as JSON lines: {"type":"ready"} once at start, then per cell zero or more
# {"type":"result","data":{mime: value}} / {"type":"error","ename","evalue","traceback"} and one
# {"type":"done"}. User output goes to the real fds 1 and 2; after a cell the marker is written to both
# so execd knows every byte of the cell's output has been read before it ends the stream.
# SIGINT interrupts a running cell (KeyboardInterrupt) and is ignored between cells.
import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import types
import warnings

CONTROL_FD = 3
KERNEL_FILE = os.path.abspath(__file__)
# Cells run in a fresh __main__ module (so pickle finds classes defined in cells and user names cannot
# clobber the kernel's own globals).
main_module = types.ModuleType('__main__')
main_module.__dict__['__builtins__'] = builtins
namespace = main_module.__dict__
# Markers go to copies of fds 1 and 2 taken at start, so a cell that redirects or closes them cannot hang execd.
MARKER_FDS = (os.dup(1), os.dup(2))
executing = False
cell_number = 0


def send(msg):
    data = (json.dumps(msg) + '\n').encode()
    while data:
        data = data[os.write(CONTROL_FD, data):]


def on_sigint(signum, frame):
    if executing:
        raise KeyboardInterrupt()


def watch_parent(parent):
    # execd gone (killed outside a sandbox): do not outlive it, even while a cell is busy.
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(1)


def mime_bundle(value):
    bundle = {'text/plain': repr(value)}
    for method, mime, binary in (('_repr_html_', 'text/html', False), ('_repr_markdown_', 'text/markdown', False),
                                 ('_repr_svg_', 'image/svg+xml', False), ('_repr_latex_', 'text/latex', False),
                                 ('_repr_json_', 'application/json', False), ('_repr_png_', 'image/png', True),
                                 ('_repr_jpeg_', 'image/jpeg', True)):
        fn = getattr(value, method, None)
        if not callable(fn):
            continue
        try:
            out = fn()
        except Exception:
            continue
        if out is None:
            continue
        if binary and isinstance(out, (bytes, bytearray)):
            out = base64.b64encode(bytes(out)).decode('ascii')
        try:
            json.dumps(out)
        except (TypeError, ValueError):
            continue
        bundle[mime] = out
    return bundle


def figure_bundles():
    """Open matplotlib figures become image/png results (like an inline backend), then are closed."""
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return []
    bundles = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format='png', bbox_inches='tight')
        bundles.append({'text/plain': repr(fig), 'image/png': base64.b64encode(buf.getvalue()).decode('ascii')})
    plt.close('all')
    return bundles


def format_error(exc):
    """ename/evalue/traceback with the kernel's own frames removed."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) != KERNEL_FILE]
    lines = []
    if frames:
        lines.append('Traceback (most recent call last):')
        lines.extend(entry.rstrip('\n') for entry in traceback.format_list(frames))
    lines.extend(entry.rstrip('\n') for entry in traceback.format_exception_only(type(exc), exc))
    try:
        evalue = str(exc)
    except Exception:
        evalue = '<unprintable %s object>' % type(exc).__name__
    return {'type': 'error', 'ename': type(exc).__name__, 'evalue': evalue, 'traceback': lines}


def run_cell(code):
    """Compiles and runs one cell; returns the value of a trailing expression (or None)."""
    global cell_number
    cell_number += 1
    filename = '<cell-%d>' % cell_number
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    tree = ast.parse(code, filename, 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, 'exec'), namespace)
    if last is not None:
        return eval(compile(last, filename, 'eval'), namespace)
    return None


def execute(code):
    global executing
    replies = []
    try:
        executing = True
        try:
            value = run_cell(code)
            if value is not None:
                namespace['_'] = value
                replies.append({'type': 'result', 'data': mime_bundle(value)})
            replies.extend({'type': 'result', 'data': b} for b in figure_bundles())
        finally:
            executing = False
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included: the kernel survives them
        executing = False
        replies.append(format_error(exc))
    return replies


def main():
    sys.modules['__main__'] = main_module
    signal.signal(signal.SIGINT, on_sigint)
    warnings.filterwarnings('ignore', message='Matplotlib is currently using agg')
    warnings.filterwarnings('ignore', message='FigureCanvasAgg is non-interactive')
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
    control = os.fdopen(CONTROL_FD, 'rb', buffering=0, closefd=False)
    reader = io.BufferedReader(control)
    send({'type': 'ready'})
    while True:
        try:
            line = reader.readline()
            if not line:
                return
            request = json.loads(line)
            replies = execute(request['code'])
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            marker = request['marker'].encode()
            for fd in MARKER_FDS:
                os.write(fd, marker)
            for reply in replies:
                send(reply)
            send({'type': 'done'})
        except KeyboardInterrupt:
            continue


if __name__ == '__main__':
    main()
