"""The TFRecord format that `stagegan prepare` writes and the `tfrecord` source reads: one
`tf.train.Example` per image, with these features (the image's encoded bytes, its class
index, and its file name below the folder, which `data.holdout`'s split reads). TF-free."""

IMAGE_FEATURE, LABEL_FEATURE, NAME_FEATURE = "image", "label", "name"
