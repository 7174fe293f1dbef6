//! `hugetune report`'s content: the view gathered from the database rows
//! (`view`) and its plots (`plots`), drawn with `hugetune_render`.

pub mod plots;
pub mod view;
