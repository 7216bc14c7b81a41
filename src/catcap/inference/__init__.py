"""The inference wing: everything that turns a trained model into captions for people.

    captioner.py     Captioner, the public class: from_pretrained, generate (catcap.Captioner)
    ensemble.py      Ensemble: several captioners decoding as one (catcap.Ensemble)
    evaluation.py    caption a split with a checkpoint and score it (catcap evaluate --checkpoint)
    pipeline.py      read | encode | decode overlapped for folders of photos (catcap caption DIR)
    caption_run.py   a caption job end to end: the model and its items, to a list, a stream or a file
    caption_file.py  the resumable JSON Lines output of catcap caption

The model itself (an ``nn.Module``) is :class:`catcap.models.caption_model.CaptionModel`; the
generation loop it runs is :func:`catcap.decoding.generate`, configured by a
:class:`catcap.decoding.GenerationConfig`. See docs/architecture.md.
"""
