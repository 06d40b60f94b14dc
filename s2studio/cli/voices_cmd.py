"""``s2studio voices list|show|add|remove|export|import`` and ``s2studio devices``."""

from __future__ import annotations

from s2studio.errors import InputError


def _library(args):
    from s2studio.engine.voices import VoiceLibrary

    return VoiceLibrary(args.voice_dir)


def run_list(args) -> int:

    return print_voices(_library(args))


def run_show(args) -> int:
    v = _library(args).get(args.id)
    i = v.info
    print(f"id:          {i.id}\nname:        {i.name}\nfile:        {i.path}\nframes:      {i.num_frames} "
          f"({i.duration_seconds:.2f} s)\nlanguage:    {i.language}\ncreated:     {i.created}\n"
          f"reference:   {i.reference_audio or '-'}\nnotes:       {i.notes}\ntranscript:  {v.transcript}")
    return 0


def run_add(args) -> int:
    import pathlib

    from s2studio.cli.options import engine_settings, read_reference_clip_noting
    from s2studio.engine.pipeline import Pipeline

    lib = _library(args)
    audio = read_reference_clip_noting(args.audio)
    if not args.text.strip():
        raise InputError("--text, the transcript of the reference audio, is empty.")
    pipeline = Pipeline(engine_settings(args), voices=lib)
    profile = pipeline.encode_voice(audio, args.text)
    info = lib.save_profile(args.id, profile, name=args.name or args.id or pathlib.Path(args.audio).stem, language=args.language,
                            notes=args.notes, reference_audio=audio, overwrite=args.overwrite)
    print(f"added voice '{info.id}' ({info.num_frames} frames, {info.duration_seconds:.1f} s) to {lib.folder}")
    return 0


def run_remove(args) -> int:
    lib = _library(args)
    lib.delete(args.id)
    print(f"removed voice '{args.id}' from {lib.folder}")
    return 0


def run_export(args) -> int:
    from s2studio.engine.voices import encode_s2voice

    from s2studio.audio.atomic_file import atomic_output, check_output_path

    from s2studio.cli.outputs import writing

    check_output_path(args.output)
    v = _library(args).get(args.id)
    with writing(args.output), atomic_output(args.output) as fh:
        fh.write(encode_s2voice(v.profile))
    print(f"exported voice '{v.id}' to {args.output} (s2.cpp .s2voice format)")
    return 0


def run_import(args) -> int:
    import pathlib

    from s2studio.engine.voices import read_s2voice

    profile = read_s2voice(args.file)  # validates the whole file first
    lib = _library(args)
    name = args.name or pathlib.Path(args.file).stem
    info = lib.save(args.id, profile.codes, profile.transcript, name=name, sample_rate=profile.sample_rate,
                    codebook_size=profile.codebook_size, overwrite=args.overwrite)
    print(f"imported voice '{info.id}' ({info.num_frames} frames) into {lib.folder}")
    return 0


def run_devices(args) -> int:
    from s2studio.engine.pipeline import Pipeline

    for dev, desc in Pipeline.available_devices():
        print(f"{dev:<8} {desc}")
    return 0


def print_voices(voices) -> int:
    infos = voices.list()
    if not infos:
        print(f"no voices in {voices.folder}")
        return 0
    for v in infos:
        extra = f"  [{v.problem}]" if v.problem else f"  {v.duration_seconds:.1f} s  {v.transcript[:50]!r}"
        print(f"{v.id:<24} {v.name:<24}{extra}")
    return 0


def register(subparsers) -> None:
    from s2studio.cli import add_log_level, add_voice_dir
    from s2studio.cli.options import add_engine_options

    p = subparsers.add_parser("voices", help="manage saved voices", description="Manage the voice library.")
    add_voice_dir(p, outermost=False)
    add_log_level(p)
    sub = p.add_subparsers(dest="voices_command", metavar="ACTION", required=True)

    def action(name: str, helptext: str):
        # The shared options work after the action too ("voices add ... --voice-dir X").
        parser = sub.add_parser(name, help=helptext)
        add_voice_dir(parser, outermost=False)
        add_log_level(parser)
        return parser

    action("list", "list saved voices").set_defaults(handler=run_list)
    s = action("show", "show one voice")
    s.add_argument("id")
    s.set_defaults(handler=run_show)
    a = action("add", "encode a reference recording and save it as a voice")
    a.add_argument("audio", help="reference audio (WAV/FLAC/OGG/MP3)")
    a.add_argument("--text", required=True, help="transcript of the reference audio")
    a.add_argument("--id", default=None, help="voice id (default: derived from the name)")
    a.add_argument("--name", default=None, help="display name (default: the audio file's name, alice.wav → alice)")
    a.add_argument("--language", default="")
    a.add_argument("--notes", default="")
    a.add_argument("--overwrite", action="store_true",
                   help="replace the voice with this id (ids ignore case: Alice replaces alice)")
    add_engine_options(a)
    a.set_defaults(handler=run_add)
    r = action("remove", "delete a voice and its files")
    r.add_argument("id")
    r.set_defaults(handler=run_remove)
    e = action("export", "write a voice as an s2.cpp .s2voice file")
    e.add_argument("id")
    e.add_argument("-o", "--output", required=True)
    e.set_defaults(handler=run_export)
    i = action("import", "add an .s2voice file (e.g. made by s2.cpp) to the library")
    i.add_argument("file")
    i.add_argument("--id", default=None)
    i.add_argument("--name", default=None)
    i.add_argument("--overwrite", action="store_true",
                   help="replace the voice with this id (ids ignore case: Alice replaces alice)")
    i.set_defaults(handler=run_import)

    d = subparsers.add_parser("devices", help="list the devices torch can use")
    add_log_level(d)
    d.set_defaults(handler=run_devices)
